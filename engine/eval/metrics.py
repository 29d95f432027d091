"""Video quality metrics: pure functions of (T, H, W, 3) uint8 videos.

Each one answers a question the bundled model must pass (issue 4, "Evaluation"):
do the lips follow the audio (``lip_sync``), does the face stay the person in the
reference (``appearance_similarity``, ``identity_stability``), are chunk seams visible
(``seam_ratio``), and how close is the video to the renderer's ground truth (``psnr``,
``ssim``). Frames of any square size work; non-square ones are centre-cropped.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from engine.eval.probe import OpennessNet, measure_openness
from engine.photo.crops import square

MAX_LAG = 5
# Left out of appearance features: the mouth moves with speech by design, which is not
# an identity change. Fractions of a square frame: (top, bottom, left, right).
MOUTH_MASK = (0.5, 0.72, 0.36, 0.64)
APPEARANCE_SIZE = 32


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson r; 0.0 when either series is constant (a frozen mouth carries no sync)."""
    a = np.asarray(a, dtype=np.float64) - np.mean(a)
    b = np.asarray(b, dtype=np.float64) - np.mean(b)
    den = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / den) if den > 1e-12 else 0.0


def lagged_pearson(measured: np.ndarray, truth: np.ndarray, lag: int) -> float:
    """r between ``measured[t + lag]`` and ``truth[t]``: a positive lag means the video is late."""
    n = min(len(measured), len(truth))
    if lag >= 0:
        return pearson(measured[lag:n], truth[: n - lag])
    return pearson(measured[: n + lag], truth[-lag:n])


def min_lip_sync_frames(max_lag: int = MAX_LAG) -> int:
    """Shortest series ``lip_sync_series`` accepts: every lag keeps a few frames to correlate."""
    return 2 * max_lag + 3


def lip_sync_series(measured: np.ndarray, truth: np.ndarray, max_lag: int = MAX_LAG) -> dict[str, float]:
    """Lip-sync scores of a measured openness series against the ground truth.

    ``best_lag`` is the lag in [-max_lag, max_lag] frames with the highest r (positive:
    the mouth moves after the audio); ties go to the smallest |lag|.
    """
    n = min(len(measured), len(truth))
    if n < min_lip_sync_frames(max_lag):
        raise ValueError(f"need at least {min_lip_sync_frames(max_lag)} frames to score lip sync, got {n}")
    scores = {lag: lagged_pearson(measured, truth, lag) for lag in range(-max_lag, max_lag + 1)}
    best = max(scores, key=lambda k: (scores[k], -abs(k)))
    return {"pearson_r": scores[0], "best_lag": best, "r_at_best_lag": scores[best]}


def lip_sync(
    frames: np.ndarray, gt_openness: np.ndarray, reference: np.ndarray, probe: OpennessNet | None = None,
    max_lag: int = MAX_LAG,
) -> dict[str, float]:
    """Mouth openness read from ``frames`` by the probe, scored against the ground truth.

    ``reference`` is the avatar's neutral image the video was generated from.
    """
    return lip_sync_series(measure_openness(frames, reference, probe), gt_openness, max_lag)


def _small(frames: np.ndarray, size: int) -> np.ndarray:
    """(T, size, size, 3) float32 in [0, 1], antialiased: detail-free, so blur barely matters."""
    x = torch.from_numpy(np.ascontiguousarray(square(frames))).permute(0, 3, 1, 2).float() / 255.0
    x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return x.permute(0, 2, 3, 1).numpy()


def _outside_mouth(size: int) -> np.ndarray:
    keep = np.ones((size, size), dtype=bool)
    t, b, left, r = (round(f * size) for f in MOUTH_MASK)
    keep[t:b, left:r] = False
    return keep


def appearance_scores(
    frames: np.ndarray, reference: np.ndarray, size: int = APPEARANCE_SIZE, batch: int = 512
) -> np.ndarray:
    """Per-frame similarity to the reference image, (T,) in [-1, 1].

    Cosine between the frame and the reference as ``size`` x ``size`` RGB thumbnails, mouth
    left out, both centred on the reference's mean colour. Centring on the reference (not
    on each frame) makes a colour or brightness drift count as well as a change of layout
    (face shape, hair, clothes, background); thumbnails make it blind to fine detail, so a
    softer but faithful face still scores high.
    """
    keep = _outside_mouth(size)
    ref = _small(np.asarray(reference)[None], size)[0][keep]
    centre = ref.mean(axis=0)
    r = (ref - centre).reshape(-1)
    r /= max(float(np.linalg.norm(r)), 1e-8)
    out = np.empty(len(frames), dtype=np.float32)
    for i in range(0, len(frames), batch):
        f = (_small(frames[i : i + batch], size)[:, keep] - centre).reshape(min(batch, len(frames) - i), -1)
        out[i : i + batch] = (f @ r) / np.maximum(np.linalg.norm(f, axis=1), 1e-8)
    return out


def appearance_similarity(frames: np.ndarray, reference: np.ndarray) -> float:
    """Mean of ``appearance_scores``: how much the video looks like the reference overall."""
    return float(appearance_scores(frames, reference).mean())


def identity_stability(frames_first: np.ndarray, frames_last: np.ndarray, reference: np.ndarray) -> float:
    """Similarity to the reference late in a generation over that early on (1.0 = no drift)."""
    return stability_ratio(appearance_scores(frames_first, reference), appearance_scores(frames_last, reference))


def stability_ratio(first_scores: np.ndarray, last_scores: np.ndarray) -> float:
    """``identity_stability`` from per-frame scores, for long runs that never hold their frames."""
    first = float(np.mean(first_scores))
    return float(np.mean(last_scores)) / first if first > 1e-8 else 0.0


def chunk_boundaries(labels: Sequence[str]) -> list[int]:
    """Frame indices where a new chunk starts (frame i's chunk differs from frame i-1's)."""
    return [i for i in range(1, len(labels)) if labels[i] != labels[i - 1]]


def frame_changes(frames: np.ndarray, batch: int = 256) -> np.ndarray:
    """(T-1,) mean absolute change per pixel and channel from frame t to t+1, in 0..255 units."""
    out = np.empty(max(len(frames) - 1, 0), dtype=np.float64)
    for i in range(0, len(out), batch):
        a = frames[i : i + batch + 1].astype(np.int16)
        out[i : i + batch] = np.abs(np.diff(a, axis=0)).mean(axis=(1, 2, 3))
    return out


def seam_ratio(frames: np.ndarray, boundaries: Sequence[str] | Sequence[int]) -> float:
    """Mean frame-to-frame change across chunk boundaries over the mean change inside chunks.

    ``boundaries``: per-frame chunk labels (``PublishedFrame.chunk``, e.g. "N3", "I2") or
    the indices of the frames that start a chunk. 1.0 means seams are invisible in the
    motion statistics; a visible jump at every seam pushes it well above 1.
    """
    if len(boundaries) and isinstance(boundaries[0], str):
        if len(boundaries) != len(frames):
            raise ValueError("need one chunk label per frame")
        starts = chunk_boundaries(boundaries)  # type: ignore[arg-type]
    else:
        starts = [int(b) for b in boundaries]
    d = frame_changes(frames)
    at = np.zeros(d.shape[0], dtype=bool)
    for b in starts:
        if 1 <= b <= d.shape[0]:
            at[b - 1] = True
    if not at.any() or at.all():
        raise ValueError("seam ratio needs both chunk boundaries and frames inside chunks")
    inside = float(d[~at].mean())
    return float(d[at].mean()) / inside if inside > 0 else float("inf")


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio (dB) over the whole video's mean squared error; inf if identical."""
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {a.shape} vs {b.shape}")
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * float(np.log10(255.0**2 / mse))


def _gaussian(sigma: float, radius: int) -> torch.Tensor:
    x = torch.arange(-radius, radius + 1, dtype=torch.float32)
    g = torch.exp(-(x * x) / (2 * sigma * sigma))
    return g / g.sum()


def _filter_last(x: torch.Tensor, g: torch.Tensor, block: int = 32) -> torch.Tensor:
    """'Valid' 1D filter along the last axis, as small matmuls over overlapping blocks.

    Far faster on CPU than torch's small-kernel convolutions, and than one full banded
    matrix (which multiplies mostly zeros).
    """
    k = g.shape[0]
    n_out = x.shape[-1] - k + 1
    blocks = -(-n_out // block)
    x = F.pad(x, (0, blocks * block + k - 1 - x.shape[-1]))
    band = torch.zeros(block + k - 1, block)
    for j in range(block):
        band[j : j + k, j] = g
    windows = x.unfold(-1, block + k - 1, block)
    out = windows.reshape(-1, block + k - 1) @ band  # one large GEMM, not many tiny batched ones
    return out.reshape(*x.shape[:-1], blocks * block)[..., :n_out]


def ssim(a: np.ndarray, b: np.ndarray, sigma: float = 1.5, batch: int = 32) -> float:
    """Mean structural similarity (Wang et al. 2004): 11x11 Gaussian window (sigma 1.5),
    K1=0.01, K2=0.03, per RGB channel, averaged over valid pixels, channels and frames."""
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {a.shape} vs {b.shape}")
    a, b = (np.asarray(v).reshape(-1, *v.shape[-3:]) for v in (a, b))
    radius = int(3.5 * sigma + 0.5)
    if min(a.shape[1:3]) < 2 * radius + 1:
        raise ValueError(f"frames must be at least {2 * radius + 1} pixels on a side for SSIM")
    g = _gaussian(sigma, radius)

    def blur(x: torch.Tensor) -> torch.Tensor:
        return _filter_last(_filter_last(x, g).transpose(-1, -2), g).transpose(-1, -2)

    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    total, count = 0.0, 0
    for i in range(0, a.shape[0], batch):
        x = torch.from_numpy(a[i : i + batch]).permute(0, 3, 1, 2).float()
        y = torch.from_numpy(b[i : i + batch]).permute(0, 3, 1, 2).float()
        mx, my = blur(x), blur(y)
        sxx, syy, sxy = blur(x * x) - mx * mx, blur(y * y) - my * my, blur(x * y) - mx * my
        s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2))
        total += float(s.double().mean(dim=(1, 2, 3)).sum())
        count += x.shape[0]
    return total / count
