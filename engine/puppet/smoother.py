"""A one-pole smoother with its own rise and fall rates: the mouth's speech gate and the face's
motion processes ease towards their targets with it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Smoother:
    """One-pole low-pass with separate rise and fall rates per step; ``y`` is all it keeps,
    so a stream can stop and resume anywhere."""

    up: float
    down: float
    y: float = 0.0

    def step(self, v: float) -> float:
        self.y += (self.up if v > self.y else self.down) * (v - self.y)
        return self.y

    def run(self, x: np.ndarray) -> np.ndarray:
        return np.array([self.step(v) for v in np.asarray(x, dtype=np.float64).tolist()], dtype=np.float64)
