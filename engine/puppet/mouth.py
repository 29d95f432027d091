"""Mouth ground truth from audio: how open, and which shape, for every video frame.

Openness follows the speech envelope (frame RMS in dBFS through a noise gate), so the
same function both drives the puppet and scores lip sync later. The shape comes from
where the energy sits: low F1 and F2 (energy below ~500 Hz, little above 1.8 kHz) is a
rounded "oo"; a strong band at 1.8-3.5 kHz over a weak 0.8-1.8 kHz one is a spread "ee"
(or a sibilant); anything else is a plain open "aa".

``MouthTracker`` is the only implementation: it takes audio in pieces of any length and
keeps filter values and the samples of the frame in progress, nothing that grows with
the stream. ``mouth_track`` runs it over a whole file, so a prefix of the audio yields a
prefix of the track and a stream yields exactly the track of its whole audio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

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
_REST_SHAPE = (1.0, 0.0, 0.0, 0.0)  # shape weights before the first frame: lips closed


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

    @classmethod
    def empty(cls, fps: int) -> MouthTrack:
        return cls(fps, np.zeros(0, np.float32), np.zeros((0, len(MOUTH_SHAPES)), np.float32), np.zeros(0, np.float32))

    @classmethod
    def concat(cls, parts: list[MouthTrack], fps: int) -> MouthTrack:
        """Consecutive pieces of one track (from successive pushes) as one track."""
        if not parts:
            return cls.empty(fps)
        return cls(
            fps,
            np.concatenate([p.openness for p in parts]),
            np.concatenate([p.weights for p in parts]),
            np.concatenate([p.level_db for p in parts]),
        )


def frame_count(n_samples: int, sample_rate: int, fps: int) -> int:
    """Frames needed to cover ``n_samples``; a trailing partial frame counts (zero-padded)."""
    return -(-n_samples * fps // sample_rate)


def frame_bounds(n_frames: int, sample_rate: int, fps: int, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sample range [start, end) of frames ``first`` .. ``first + n_frames - 1``: frame n covers
    [n*sr/fps, (n+1)*sr/fps)."""
    n = np.arange(first, first + n_frames + 1, dtype=np.int64)
    edges = (n * sample_rate) // fps
    return edges[:-1], edges[1:]


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


@dataclass
class MouthTracker:
    """Streaming ``mouth_track``: ``push`` audio in pieces of any length, get each frame once
    the audio it looks at is in; ``close`` ends the stream and returns what is left.

    Frame n's spectrum window is ``ceil(sr/fps)`` samples from the frame's first sample, so
    where fps does not divide the sample rate it reaches ``lookahead`` (one) sample into the
    next frame, and such a frame comes with the push that brings that sample. ``close``
    zero-pads the last partial frame, as ``mouth_track`` does at the end of a file.
    """

    sample_rate: int
    fps: int = 25
    gate_db: float = GATE_DB
    full_db: float = FULL_DB
    frame: int = field(default=0, init=False)  # next frame to analyse
    received: int = field(default=0, init=False)  # samples pushed so far
    closed: bool = field(default=False, init=False)
    # Running sum of squared samples up to ``frame``'s first sample: frame energies are
    # differences of it, exactly as a cumulative sum over the whole file gives them.
    energy: float = field(default=0.0, init=False)
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32), init=False)  # from ``frame`` on
    openness: Smoother = field(default_factory=lambda: Smoother(ATTACK, RELEASE), init=False)
    shape: np.ndarray = field(default_factory=lambda: np.array(_REST_SHAPE), init=False)

    def __post_init__(self) -> None:
        if self.sample_rate < 8000:
            raise ValueError(f"need at least 8 kHz audio to see the 3.5 kHz band, got {self.sample_rate}")

    @property
    def window(self) -> int:
        return math.ceil(self.sample_rate / self.fps)

    @property
    def lookahead(self) -> int:
        """Samples past a frame's end its analysis needs: 0 when fps divides the sample rate."""
        return self.window - self.sample_rate // self.fps

    def push(self, pcm: np.ndarray) -> MouthTrack:
        """Mono float audio continuing the stream -> the frames it completes (possibly none)."""
        if self.closed:
            raise RuntimeError("the mouth tracker is closed")
        x = np.asarray(pcm, dtype=np.float32).reshape(-1)
        self.pending = np.concatenate([self.pending, x])
        self.received += x.shape[0]
        room = self.received - self.window  # the last frame start whose window is complete
        return self._analyse(frame_count(room + 1, self.sample_rate, self.fps) if room >= 0 else 0)

    def close(self) -> MouthTrack:
        """End of the audio: the remaining frames, the last one zero-padded."""
        if self.closed:
            return MouthTrack.empty(self.fps)
        self.closed = True
        end = frame_count(self.received, self.sample_rate, self.fps)
        if end > self.frame:
            first = self.frame * self.sample_rate // self.fps
            need = (end - 1) * self.sample_rate // self.fps + self.window - first
            self.pending = np.concatenate([self.pending, np.zeros(max(0, need - self.pending.shape[0]), np.float32)])
        return self._analyse(end)

    def _analyse(self, end: int) -> MouthTrack:
        """Frames [self.frame, end), whose windows lie in ``pending``, in blocks of ``_BLOCK``."""
        parts, offset = [], 0
        while self.frame < end:
            part, used = self._block(self.pending[offset:], min(end - self.frame, _BLOCK))
            parts.append(part)
            offset += used
        if offset:
            self.pending = self.pending[offset:].copy()
        return MouthTrack.concat(parts, self.fps)

    def _block(self, x: np.ndarray, count: int) -> tuple[MouthTrack, int]:
        """``count`` frames from ``self.frame``; ``x`` starts at its first sample. Returns the
        frames and the samples they consumed."""
        starts, ends = frame_bounds(count, self.sample_rate, self.fps, self.frame)
        starts, ends = starts - starts[0], ends - starts[0]
        sq = np.cumsum(np.concatenate([[self.energy], x[: ends[-1]].astype(np.float64) ** 2]))
        level = 10.0 * np.log10((sq[ends] - sq[starts]) / np.maximum(ends - starts, 1) + 1e-10)
        raw = np.clip((level - self.gate_db) / (self.full_db - self.gate_db), 0.0, 1.0) ** CURVE
        openness = self.openness.run(raw)
        openness[openness < 0.02] = 0.0
        front, back = _formant_balance(x, starts, self.sample_rate, self.window)
        weights, self.shape = _shape_weights(openness, front, back, self.shape)
        self.energy = float(sq[ends[-1]])
        self.frame += count
        return MouthTrack(self.fps, openness.astype(np.float32), weights, level.astype(np.float32)), int(ends[-1])


def mouth_track(
    pcm: np.ndarray, sample_rate: int, fps: int = 25, gate_db: float = GATE_DB, full_db: float = FULL_DB
) -> MouthTrack:
    """Mouth openness and shape weights for every video frame of mono float audio."""
    tracker = MouthTracker(sample_rate, fps, gate_db, full_db)
    return MouthTrack.concat([tracker.push(pcm), tracker.close()], fps)


def openness_series(pcm: np.ndarray, sample_rate: int, fps: int = 25) -> np.ndarray:
    """Ground-truth mouth openness per video frame, (T,) float32 in [0, 1]: the lip-sync target."""
    return mouth_track(pcm, sample_rate, fps).openness


def _formant_balance(x: np.ndarray, starts: np.ndarray, sample_rate: int, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Per frame: dB(1.8-3.5 kHz) - dB(0.8-1.8 kHz) ("front"), dB(0.1-0.5) - dB(0.5-1.2) ("back").

    ``x`` holds every window ``[start, start + window)``. Each frame is transformed on its own
    row and its bins are summed in ascending order (an accumulate: a plain ``sum`` changes its
    order when a batch has a single row), so a frame's numbers never depend on which other
    frames share its batch, and a stream matches its whole file exactly.
    """
    nfft = 1 << (window - 1).bit_length()
    freqs = np.fft.rfftfreq(nfft, 1.0 / sample_rate)
    bands = [(freqs >= lo) & (freqs < hi) for lo, hi in ((1800, 3500), (800, 1800), (100, 500), (500, 1200))]
    taper = np.hanning(window).astype(np.float32)
    spec = np.fft.rfft(x[starts[:, None] + np.arange(window)[None, :]] * taper, nfft)
    power = spec.real**2 + spec.imag**2
    db = np.stack([10.0 * np.log10(np.cumsum(power[:, m], axis=1)[:, -1] + 1e-12) for m in bands], axis=1)
    db = db.astype(np.float64)
    return db[:, 0] - db[:, 1], db[:, 2] - db[:, 3]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _shape_weights(
    openness: np.ndarray, front: np.ndarray, back: np.ndarray, prev: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Smoothed shape weights per frame, from the smoother's value ``prev`` before the first;
    returns the weights and the smoother's value after the last."""
    wide = _sigmoid((front - 15.0) / 5.0)
    rounded = _sigmoid((back - 12.0) / 5.0) * (1.0 - wide)
    shaped = np.stack([1.0 - wide - rounded, rounded, wide], axis=1)
    active = np.clip(openness / 0.25, 0.0, 1.0)[:, None]
    w = np.concatenate([1.0 - active, active * shaped], axis=1)
    out = np.empty_like(w)
    for i in range(w.shape[0]):
        prev = prev + SHAPE_SMOOTH * (w[i] - prev)
        out[i] = prev
    out /= out.sum(axis=1, keepdims=True)
    return out.astype(np.float32), prev
