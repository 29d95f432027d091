"""A fake engine at the session pipelines' ports (``server.base.engine_port``: ``EngineInput``, ``EngineOutput``), for
testing each alone."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

RATE = 16000
FPS = 25


class FakeEngine:
    """Both ports: records each block fed, the cuts and the origins told, and keeps up (generated = fed)."""

    def __init__(self, lookahead_samples: int = 0) -> None:
        self.info = SimpleNamespace(sample_rate=RATE, fps=FPS)
        self.lookahead_samples = lookahead_samples
        self.blocks: list[tuple[int, np.ndarray]] = []
        self.silenced: list[int] = []
        self.origins: list[float | None] = []

    def feed(self, start: int, samples: np.ndarray) -> None:
        self.blocks.append((start, samples.copy()))

    def silence_from(self, sample: int) -> None:
        self.silenced.append(sample)

    def set_origin(self, origin: float | None) -> None:
        self.origins.append(origin)

    @property
    def fed(self) -> int:
        return max((start + b.size for start, b in self.blocks), default=0)

    def timeline(self) -> np.ndarray:
        """The audio fed, each block written where it starts (a later one over an earlier)."""
        out = np.zeros(self.fed, np.float32)
        for start, b in self.blocks:
            out[start:start + b.size] = b
        return out
