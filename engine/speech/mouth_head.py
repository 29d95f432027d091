"""Speech features -> a mouth: openness and the four shape weights of ``MOUTH_SHAPES``.

A linear read of the encoder's features, fitted to the phone truth of the training voices by
ridge regression (``engine.train.mouth_head``). The encoder learned real voices; the head only
learns how phones move a mouth, which synthetic voices teach as well as real ones.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

HEAD_FILE = Path(__file__).resolve().parent / "mouth_head.safetensors"


@dataclass(frozen=True)
class MouthHead:
    """``weight`` (5, width) and ``bias`` (5,): openness, then the shape weights."""

    weight: np.ndarray
    bias: np.ndarray

    def linear(self, features: np.ndarray) -> np.ndarray:
        """(T, width) -> the linear read (T, 5): openness and the 4 shape weights, unclipped."""
        return np.asarray(features, np.float32) @ self.weight.T + self.bias

    def __call__(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(T, width) -> openness (T,) in [0, 1] and shape weights (T, 4) summing to 1."""
        y = self.linear(features)
        shapes = np.clip(y[:, 1:], 0.0, None) + 1e-6
        return np.clip(y[:, 0], 0.0, 1.0), shapes / shapes.sum(axis=1, keepdims=True)

    def save(self, path: Path) -> None:
        save_file({"weight": np.ascontiguousarray(self.weight, np.float32),
                   "bias": np.ascontiguousarray(self.bias, np.float32)}, str(path))

    @classmethod
    def load(cls, path: Path) -> MouthHead:
        tensors = load_file(str(path))
        return cls(tensors["weight"], tensors["bias"])


@functools.cache
def load_mouth_head(path: Path = HEAD_FILE) -> MouthHead:
    return MouthHead.load(path)
