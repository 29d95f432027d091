"""Streaming audio-to-video avatar engine.

Layers: ``engine.modules`` (one model each), ``engine.stages`` (typed steps over
modules), ``engine.pipeline`` (rolling state, chunk schedule, streaming and batch).
This package imports nothing from ``server`` or the web stack.
"""

from engine.frames import PublishedFrame

__all__ = ["PublishedFrame"]
