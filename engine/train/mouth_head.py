"""Fitting the mouth head (``engine.speech.mouth_head``): the training voices' speech, read by the
speech encoder as a stream is, against its phone truth, by ridge regression on standardised
features. Clips are generated from seeds (``engine.train.speech.utterance``), so a fit is
repeatable; only sums are kept, so memory does not grow with the clips.

    python -m engine.train.mouth_head --clips 400
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import torch

from engine.puppet.mouth import phone_track
from engine.speech.encoder import SAMPLE_RATE
from engine.speech.mouth_head import HEAD_FILE, MouthHead
from engine.speech.reader import SpeechReader

CLIP_SEED = 10_000  # clip k is generated from seed CLIP_SEED + k
CLIP_SECONDS = 8.0
RIDGE = 100.0  # on standardised features; 10 to 1000 read held-out real mouths alike


def clip_pair(pcm: np.ndarray, truth: np.ndarray, fps: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """(features, targets) of 16 kHz speech whose per-frame truth (T, 5) is known, read as a stream."""
    reader = SpeechReader(fps)
    reader.push(pcm)
    features = reader.features(0, len(truth), final=True)
    return features, truth


def training_clip(index: int, fps: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """The speech of clip ``index`` and its phone truth, (T,) openness and (T, 4) weights stacked as (T, 5)."""
    from engine.train.speech import utterance

    speech = utterance(np.random.default_rng(CLIP_SEED + index), SAMPLE_RATE, seconds=CLIP_SECONDS)
    track = phone_track(speech.phones, speech.pcm, SAMPLE_RATE, fps)
    return speech.pcm, np.concatenate([track.openness[:, None], track.weights], axis=1)


@dataclass
class RidgeSums:
    """What a ridge fit needs of its data: counts, sums and cross products."""

    n: int = 0
    sx: np.ndarray | None = field(default=None, repr=False)
    sy: np.ndarray | None = field(default=None, repr=False)
    xx: np.ndarray | None = field(default=None, repr=False)
    xy: np.ndarray | None = field(default=None, repr=False)
    yy: np.ndarray | None = field(default=None, repr=False)

    def add(self, x: np.ndarray, y: np.ndarray) -> None:
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if self.sx is None:
            self.sx, self.sy = np.zeros(x.shape[1]), np.zeros(y.shape[1])
            self.xx, self.xy = np.zeros((x.shape[1], x.shape[1])), np.zeros((x.shape[1], y.shape[1]))
            self.yy = np.zeros((y.shape[1], y.shape[1]))
        self.n += len(x)
        self.sx += x.sum(0)
        self.sy += y.sum(0)
        self.xx += x.T @ x
        self.xy += x.T @ y
        self.yy += y.T @ y

    def solve(self, ridge: float = RIDGE, stretch: bool = True) -> MouthHead:
        if self.n < 2 or self.sx is None:
            raise ValueError("a fit needs at least two frames")
        mx, my = self.sx / self.n, self.sy / self.n
        cxx = self.xx - self.n * np.outer(mx, mx)
        cxy = self.xy - self.n * np.outer(mx, my)
        sd = np.sqrt(np.maximum(np.diag(cxx) / self.n, 1e-12))
        standard = np.linalg.solve(cxx / np.outer(sd, sd) + ridge * np.eye(len(sd)), cxy / sd[:, None])
        weight = (standard / sd[:, None]).T
        if stretch:  # a least-squares read is narrower than its truth (by r): widened back to the truth's spread
            spread = np.sqrt(np.maximum(np.einsum("od,de,oe->o", weight, cxx, weight), 1e-12))
            truth = np.sqrt(np.maximum(np.diag(self.yy - self.n * np.outer(my, my)), 0.0))
            weight = weight * (truth / spread)[:, None]
        return MouthHead(weight.astype(np.float32), (my - weight @ mx).astype(np.float32))


def fit(pairs: Iterable[tuple[np.ndarray, np.ndarray]], ridge: float = RIDGE, stretch: bool = True) -> MouthHead:
    sums = RidgeSums()
    for features, targets in pairs:
        sums.add(features, targets)
    return sums.solve(ridge, stretch)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clips", type=int, default=400)
    p.add_argument("--out", default=str(HEAD_FILE))
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    head = fit(clip_pair(*training_clip(k)) for k in range(args.clips))
    head.save(args.out)
    print(f"mouth head fitted on {args.clips} clips -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
