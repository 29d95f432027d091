"""Mouth ground truth from audio: how open, and which shape, for every video frame.

Openness follows the speech envelope (frame RMS in dBFS through a noise gate), so the
same function both drives the puppet and scores lip sync later. The shape comes from
where the energy sits: low F1 and F2 (energy below ~500 Hz, little above 1.8 kHz) is a
rounded "oo"; a strong band at 1.8-3.5 kHz over a weak 0.8-1.8 kHz one is a spread "ee"
(or a sibilant); anything else is a plain open "aa".
Everything is causal, so a prefix of the audio yields a prefix of the track.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.puppet.state import MOUTH_SHAPES

# Calibrated for speech around -20 dBFS RMS (TTS output, a normalised mic); pass other
# levels to ``mouth_track`` for quieter sources.
GATE_DB = -50.0  # frame RMS (dBFS) at or below which the mouth is closed: silence, breath, hum
FULL_DB = -12.0  # frame RMS at which the mouth is fully open
CURVE = 1.5  # >1 keeps quiet consonants nearly closed and spreads the vowels
ATTACK = 0.85  # per-frame smoothing towards a louder frame: opens almost at once
RELEASE = 0.65  # per-frame smoothing towards a quieter frame: closes a little slower
SHAPE_SMOOTH = 0.6
_BLOCK = 512  # frames per FFT batch, bounds memory on long files


@dataclass(frozen=True)
class MouthTrack:
    """Per-frame mouth ground truth: ``openness`` (T,), ``weights`` (T, 4) in ``MOUTH_SHAPES`` order."""

    fps: int
    openness: np.ndarray
    weights: np.ndarray
    level_db: np.ndarray

    def __len__(self) -> int:
        return int(self.openness.shape[0])

    def weight(self, shape: str) -> np.ndarray:
        return self.weights[:, MOUTH_SHAPES.index(shape)]


def frame_count(n_samples: int, sample_rate: int, fps: int) -> int:
    """Frames needed to cover ``n_samples``; a trailing partial frame counts (zero-padded)."""
    return -(-n_samples * fps // sample_rate)


def frame_bounds(n_frames: int, sample_rate: int, fps: int) -> tuple[np.ndarray, np.ndarray]:
    """Sample range [start, end) of each frame: frame n covers [n*sr/fps, (n+1)*sr/fps)."""
    n = np.arange(n_frames + 1, dtype=np.int64)
    edges = (n * sample_rate) // fps
    return edges[:-1], edges[1:]


def mouth_track(
    pcm: np.ndarray, sample_rate: int, fps: int = 25, gate_db: float = GATE_DB, full_db: float = FULL_DB
) -> MouthTrack:
    """Mouth openness and shape weights for every video frame of mono float audio."""
    x = np.asarray(pcm, dtype=np.float32).reshape(-1)
    if sample_rate < 8000:
        raise ValueError(f"need at least 8 kHz audio to see the 3.5 kHz band, got {sample_rate}")
    T = frame_count(x.shape[0], sample_rate, fps)
    starts, ends = frame_bounds(T, sample_rate, fps)
    level = _frame_level_db(x, starts, ends)
    raw = np.clip((level - gate_db) / (full_db - gate_db), 0.0, 1.0) ** CURVE
    openness = _attack_release(raw, ATTACK, RELEASE)
    openness[openness < 0.02] = 0.0
    front, back = _formant_balance(x, starts, sample_rate, fps)
    weights = _shape_weights(openness, front, back)
    return MouthTrack(fps, openness.astype(np.float32), weights, level.astype(np.float32))


def openness_series(pcm: np.ndarray, sample_rate: int, fps: int = 25) -> np.ndarray:
    """Ground-truth mouth openness per video frame, (T,) float32 in [0, 1]: the lip-sync target."""
    return mouth_track(pcm, sample_rate, fps).openness


def _frame_level_db(x: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    sq = np.concatenate([[0.0], np.cumsum(x.astype(np.float64) ** 2)])
    ends_c = np.minimum(ends, x.shape[0])
    energy = (sq[ends_c] - sq[np.minimum(starts, x.shape[0])]) / np.maximum(ends - starts, 1)
    return 10.0 * np.log10(energy + 1e-10)


def _attack_release(x: np.ndarray, attack: float, release: float) -> np.ndarray:
    out = np.empty_like(x)
    y = 0.0
    for i, v in enumerate(x.tolist()):
        y += (attack if v > y else release) * (v - y)
        out[i] = y
    return out


def _formant_balance(
    x: np.ndarray, starts: np.ndarray, sample_rate: int, fps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per frame: dB(1.8-3.5 kHz) - dB(0.8-1.8 kHz) ("front"), dB(0.1-0.5) - dB(0.5-1.2) ("back")."""
    L = math.ceil(sample_rate / fps)
    nfft = 1 << (L - 1).bit_length()
    freqs = np.fft.rfftfreq(nfft, 1.0 / sample_rate)
    bands = [(freqs >= lo) & (freqs < hi) for lo, hi in ((1800, 3500), (800, 1800), (100, 500), (500, 1200))]
    padded = np.concatenate([x, np.zeros(L, dtype=np.float32)])
    window = np.hanning(L).astype(np.float32)
    T = starts.shape[0]
    db = np.empty((T, 4), dtype=np.float64)
    for b0 in range(0, T, _BLOCK):
        idx = starts[b0 : b0 + _BLOCK, None] + np.arange(L)[None, :]
        spec = np.fft.rfft(padded[idx] * window, nfft)
        power = spec.real**2 + spec.imag**2
        for k, m in enumerate(bands):
            db[b0 : b0 + _BLOCK, k] = 10.0 * np.log10(power[:, m].sum(axis=1) + 1e-12)
    return db[:, 0] - db[:, 1], db[:, 2] - db[:, 3]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _shape_weights(openness: np.ndarray, front: np.ndarray, back: np.ndarray) -> np.ndarray:
    wide = _sigmoid((front - 15.0) / 5.0)
    rounded = _sigmoid((back - 12.0) / 5.0) * (1.0 - wide)
    shaped = np.stack([1.0 - wide - rounded, rounded, wide], axis=1)
    active = np.clip(openness / 0.25, 0.0, 1.0)[:, None]
    w = np.concatenate([1.0 - active, active * shaped], axis=1)
    out = np.empty_like(w)
    prev = np.array([1.0, 0.0, 0.0, 0.0])
    for i in range(w.shape[0]):
        prev = prev + SHAPE_SMOOTH * (w[i] - prev)
        out[i] = prev
    out /= out.sum(axis=1, keepdims=True)
    return out.astype(np.float32)
