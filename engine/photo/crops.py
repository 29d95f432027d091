"""Regions of a square driver-face frame, cropped for the small readers that look at them: the
motion reader (``engine.photo.reader``) at run time, the openness probe (``engine.eval.probe``)
when scoring, and the trainers of both."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

# Mouth region as fractions of a square frame: (top, bottom, left, right). It covers the
# mouth under every pose the puppet's face tracks produce, plus the chin (jaw drop).
CROP = (0.42, 0.77, 0.33, 0.67)
INPUT = 32



def square(frames: np.ndarray) -> np.ndarray:
    """Centre-crop (T, H, W, 3) frames to square, the way the pipeline crops its reference."""
    h, w = frames.shape[1:3]
    if h == w:
        return frames
    s = min(h, w)
    y, x = (h - s) // 2, (w - s) // 2
    return frames[:, y : y + s, x : x + s]


def region_crops(frames: np.ndarray, region: tuple[float, float, float, float],
                 size: tuple[int, int]) -> torch.Tensor:
    """(T, H, W, 3) uint8 -> (T, 3, *size) float in [0, 1]: ``region`` (top, bottom, left, right,
    fractions of the square frame), any frame size."""
    frames = square(np.asarray(frames))
    s = frames.shape[1]
    t, b, left, r = (round(f * s) for f in region)
    x = torch.from_numpy(np.ascontiguousarray(frames[:, t:b, left:r])).permute(0, 3, 1, 2).float() / 255.0
    return F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)


def mouth_crops(frames: np.ndarray) -> torch.Tensor:
    """(T, H, W, 3) uint8 -> (T, 3, INPUT, INPUT) float in [0, 1]: the mouth region, any frame size."""
    return region_crops(frames, CROP, (INPUT, INPUT))


def standardised(x: torch.Tensor) -> torch.Tensor:
    """(N, 6, h, w) frame+reference crop pairs, each crop standardised on its own, so that skin
    and lip colour matter less to a reader than shape."""
    crops = x.unflatten(1, (2, 3))
    mean = crops.mean(dim=(2, 3, 4), keepdim=True)
    std = crops.std(dim=(2, 3, 4), keepdim=True).clamp_min(0.02)
    return ((crops - mean) / std).flatten(1, 2)
