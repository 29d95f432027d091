"""Mouth-openness probe: a tiny CNN that reads how far the lips part from a video frame.

Lip sync is scored on pixels, not on the model's internals, so any engine (the puppet,
the trained model, a future one) is measured the same way. The probe is trained on
puppet frames whose openness is known exactly (``engine.train.probe``), across many sampled
identities, head poses, blinks and mouth shapes, with blur/noise/colour augmentation so it
also reads the softer frames a generative model produces. It also sees the avatar's reference
(neutral, mouth closed): how wide this identity's mouth is at rest separates a wide
"ee" from an open "aa" that is equally tall, which no single frame can.

Regenerate the shipped weights with ``python -m engine.train.probe`` (about 35 s of CPU).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch
from torch import nn

from engine.modules.base import load_trained
from engine.photo.crops import INPUT, mouth_crops, standardised

PROBE_PATH = Path(__file__).with_name("openness.safetensors")


class OpennessNet(nn.Module):
    """Three strided convs and a small head (~25k weights), cheap enough to train in seconds.

    Input: the frame's mouth crop and the reference's, stacked (6 channels). Each crop is
    standardised on its own first, so skin and lip colour matter less than shape.
    """

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(6, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(),
        )
        side = INPUT // 8
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * side * side, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(standardised(x))).squeeze(1)


@functools.lru_cache(maxsize=4)
def load_probe(path: Path = PROBE_PATH) -> OpennessNet:
    """The shipped probe (loaded once per process; it is read-only)."""
    return load_trained(OpennessNet(), path, "openness probe", "engine.train.probe")


def measure_openness(
    frames: np.ndarray, reference: np.ndarray, probe: OpennessNet | None = None, batch: int = 256
) -> np.ndarray:
    """Mouth openness read from each frame of a (T, H, W, 3) uint8 video, (T,) float32 in [0, 1].

    ``reference`` is the avatar's neutral image (H', W', 3), the one the video was made from.
    """
    net = probe or load_probe()
    ref = mouth_crops(np.asarray(reference)[None])
    out = np.empty(len(frames), dtype=np.float32)
    with torch.inference_mode():
        for i in range(0, len(frames), batch):
            crops = mouth_crops(frames[i : i + batch])
            x = torch.cat([crops, ref.expand(crops.shape[0], -1, -1, -1)], dim=1)
            out[i : i + batch] = net(x).clamp(0.0, 1.0).numpy()
    return out
