"""Fitting the mouth head (``engine.speech.mouth_head``): the training voices' speech, read by the
speech encoder as a stream is, against its phone truth, by ridge regression on standardised
features. Clips are generated from seeds (``engine.train.speech.utterance``), so a fit is
repeatable; only sums are kept, so memory does not grow with the clips.

Phones say what a mouth does only through a map set by hand. Real people talking, with their lip
gap read by the face mesh, teach the opening as real mouths make it: ``--real-lips`` adds the
videos of a folder (``engine/train/real_lips/SOURCES.md`` lists the ones the shipped head saw,
none of them a speaker ``avatar eval --real`` scores), each heard as recorded and as
``--real-copies`` other microphones and voices would give it (``heard_copy``), each frame counting
``--real-weight`` synthetic ones over all its copies.

    python -m engine.train.mouth_head --clips 330 --real-lips DIR
"""

from __future__ import annotations

import argparse
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from engine.media.espeak import resample
from engine.puppet.mouth import phone_track
from engine.speech.encoder import SAMPLE_RATE
from engine.speech.mouth_head import HEAD_FILE, MouthHead
from engine.speech.reader import SpeechReader

CLIP_SEED = 10_000  # clip k is generated from seed CLIP_SEED + k
CLIP_SECONDS = 8.0
RIDGE = 100.0  # on standardised features; 10 to 1000 read held-out real mouths alike
# A real frame, over all its copies, counts as this many synthetic ones: 33 clips (7.5 min) beside
# 330 (44 min). Chosen on the tuning clips of ``avatar eval --real``, which read 5 to 12 alike.
REAL_WEIGHT = 8.0
REAL_COPIES = 4  # perturbed copies of each real clip beside the clip as recorded
VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".webm", ".avi")


def clip_pair(pcm: np.ndarray, truth: np.ndarray, fps: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """(features, targets) of 16 kHz speech whose per-frame truth (T, 5) is known, read as a stream."""
    return heard_features(pcm, len(truth), fps), truth


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


    def spread(self, column: int) -> tuple[float, float]:
        """Mean and standard deviation of target ``column``."""
        mean = self.sy[column] / self.n
        return float(mean), float(np.sqrt(max(self.yy[column, column] / self.n - mean * mean, 0.0)))

    def merged(self, other: RidgeSums, weight: float = 1.0) -> RidgeSums:
        """These sums and ``other``'s, each of its frames counting ``weight`` of these."""
        return RidgeSums(self.n + weight * other.n, self.sx + weight * other.sx, self.sy + weight * other.sy,
                         self.xx + weight * other.xx, self.xy + weight * other.xy, self.yy + weight * other.yy)


def fit(pairs: Iterable[tuple[np.ndarray, np.ndarray]], ridge: float = RIDGE, stretch: bool = True) -> MouthHead:
    return sums_of(pairs).solve(ridge, stretch)


def sums_of(pairs: Iterable[tuple[np.ndarray, np.ndarray]]) -> RidgeSums:
    sums = RidgeSums()
    for features, targets in pairs:
        sums.add(features, targets)
    return sums


def real_lip_pair(features: np.ndarray, gap: np.ndarray, synthetic: MouthHead,
                  openness: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """(features, targets) of a real talking clip's frames with a face. Its openness is the lip
    gap standardised to the synthetic truth's ``openness`` (mean, sd) and paired with the
    features at the lag (within ``MAX_LAG`` frames) where the synthetic head's read follows it
    best: the clip's own audio-to-video offset. Its shape weights are the synthetic head's read:
    a gap says how far the lips part, not their shape."""
    from engine.eval.real import best_lag

    n = min(len(features), len(gap))
    face = ~np.isnan(gap[:n])
    if face.sum() < 2:
        return np.zeros((0, features.shape[1]), np.float32), np.zeros((0, 5), np.float32)
    gap = np.where(face, gap[:n], np.nanmedian(gap[:n]))
    targets = synthetic.linear(features[:n])
    _, lag = best_lag(targets[:, 0], gap)
    mean, sd = openness
    opening = mean + sd * (gap - gap[face].mean()) / max(float(gap[face].std()), 1e-9)
    # the read at frame t + lag goes with the gap at t
    at = np.arange(max(0, -lag), n - max(0, lag))
    targets, face = targets[at + lag], face[at]
    targets[:, 0] = opening[at]
    return features[at + lag][face], targets[face]


def heard_copy(rng: np.random.Generator, pcm: np.ndarray, gap: np.ndarray, warped: bool,
               fps: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """A real clip's 16 kHz audio as another microphone and room would give it (reverb, noise, a
    narrow band, the Opus round trip, each by chance), and if ``warped`` another voice (sped up
    or slowed, pitch and vocal tract with it), with its per-frame lip gap kept in time."""
    from engine.train import augment

    n = len(gap)
    pcm = np.asarray(pcm[: n * SAMPLE_RATE // fps], np.float32)
    if warped:  # played ``factor`` faster: frame j of the copy shows the lips at the original's j * factor
        factor = rng.uniform(*augment.WARP)
        pcm = resample(pcm, int(round(SAMPLE_RATE * factor)), SAMPLE_RATE)
        at = np.arange(len(pcm) * fps // SAMPLE_RATE) * factor
        face = ~np.isnan(gap)
        warped_gap = np.interp(at, np.flatnonzero(face), gap[face]) if face.any() else np.full(len(at), np.nan)
        warped_gap[~face[np.rint(at).astype(int).clip(0, n - 1)]] = np.nan
        gap = warped_gap
    for share, perturb in ((0.5, lambda x: augment.reverb(rng, x, SAMPLE_RATE)), (0.5, lambda x: augment.noise(rng, x)),
                           (0.4, lambda x: augment.band(rng, x, SAMPLE_RATE)),
                           (0.5, lambda x: augment.opus(rng, x, SAMPLE_RATE))):
        if rng.random() < share:
            pcm = perturb(pcm)
    return pcm, gap


def heard_features(pcm: np.ndarray, frames: int, fps: int = 25) -> np.ndarray:
    """(frames, width) features of 16 kHz audio read as a stream."""
    reader = SpeechReader(fps)
    reader.push(pcm[: frames * SAMPLE_RATE // fps])
    return reader.features(0, frames, final=True)


def real_lip_clip(path: Path, copies: int = 0, fps: int = 25,
                  max_seconds: float = 60.0) -> list[tuple[np.ndarray, np.ndarray]]:
    """A video's (features, lip gap) per frame, its audio read as a stream and its frames by the
    face mesh: as recorded, then ``copies`` times as ``heard_copy`` perturbs it (every other copy
    warped). The copies are drawn from the file's name, so a fit is repeatable."""
    from engine.eval.real import lip_gaps, load_real_clip

    clip = load_real_clip(path, SAMPLE_RATE, fps)
    frames = clip.frames[: int(max_seconds * fps)]
    gap = lip_gaps(frames)
    heard = [(heard_features(clip.pcm, len(frames), fps), gap)]
    rng = np.random.default_rng(zlib.crc32(path.stem.encode()))
    for k in range(1, copies + 1):
        pcm, copy_gap = heard_copy(rng, clip.pcm, gap, warped=k % 2 == 0, fps=fps)
        heard.append((heard_features(pcm, len(copy_gap), fps), copy_gap))
    return heard


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clips", type=int, default=400)
    p.add_argument("--out", default=str(HEAD_FILE))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--real-lips", type=Path, help="a folder of videos of real people talking")
    p.add_argument("--real-weight", type=float, default=REAL_WEIGHT, help="of a real frame, over all its copies")
    p.add_argument("--real-copies", type=int, default=REAL_COPIES)
    args = p.parse_args(argv)
    videos = []
    if args.real_lips:
        if not args.real_lips.is_dir():
            p.error(f"--real-lips {args.real_lips} is not a folder")
        videos = sorted(v for v in args.real_lips.iterdir() if v.suffix.lower() in VIDEO_SUFFIXES)
        if not videos:
            p.error(f"no videos in {args.real_lips}")
    torch.set_num_threads(args.threads)
    sums = sums_of(clip_pair(*training_clip(k)) for k in range(args.clips))
    if videos:
        synthetic, openness = sums.solve(), sums.spread(0)
        real = sums_of(real_lip_pair(features, gap, synthetic, openness)
                       for v in videos for features, gap in real_lip_clip(v, args.real_copies))
        if not real.n:
            p.error(f"no face in any video of {args.real_lips}")
        sums = sums.merged(real, args.real_weight / (1 + args.real_copies))
    sums.solve().save(args.out)
    print(f"mouth head fitted on {args.clips} clips and {len(videos)} real videos -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
