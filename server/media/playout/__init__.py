"""Playout jitter buffer: paces bursty engine frames out as one video and one audio stream."""

from server.media.playout.buffer import AudioOut, PlayoutBuffer, PlayoutClosed, PlayoutConfig, PlayoutStats, VideoOut

__all__ = ["AudioOut", "PlayoutBuffer", "PlayoutClosed", "PlayoutConfig", "PlayoutStats", "VideoOut"]
