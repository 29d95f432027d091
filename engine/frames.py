"""What the engine hands to its consumers: one video frame with the audio that drove it."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np


@dataclass(frozen=True)
class PublishedFrame:
    """A finished video frame on the session's media timeline.

    ``index`` is the global video frame number; ``pts`` (seconds) is derived from the
    audio sample index that drives the frame, never from wall time. ``audio`` holds the
    mono float32 samples (engine sample rate) covering exactly this frame's time span,
    so audio and video share one timeline end to end.
    """

    index: int
    fps: int
    rgb: np.ndarray  # (H, W, 3) uint8
    audio: np.ndarray  # (sample_rate // fps,) float32 in [-1, 1]
    sample_rate: int
    chunk: str  # which chunk produced it, e.g. "N3" or "I2"

    @property
    def pts(self) -> Fraction:
        return Fraction(self.index, self.fps)

    @property
    def sample_index(self) -> int:
        return self.index * self.sample_rate // self.fps
