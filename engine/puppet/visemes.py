"""Phones to mouth: what the lips do for each sound, blended across neighbours.

A mouth says the words, not the loudness: each phone (ARPAbet, as CMU Sphinx and its
dictionary spell them) has a target opening and shape and a dominance, and the track is the
dominance-weighted blend of the phones around each instant (coarticulation, after Cohen and
Massaro): a vowel's opening reaches into its consonants, the lips round early for an "oo".
Bilabials (p, b, m) always close and press the lips, however loud, for at least the video
frame holding their middle; f and v bring the lip to the teeth; pauses rest at the relaxed,
slightly parted mouth. Loudness only scales the vowels' opening a little (emphasis). The lips
shape each sound ``LEAD`` before it is heard: real speakers' lips lead their voices (the heard
mouth without it ran a median two frames behind real mouths on the evaluation clips, with it none).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.puppet.state import SHAPE_ONSET

REST_OPENNESS = 0.04  # the relaxed mouth between words: lips just apart, below motion's SPEAKING
LABIODENTAL_MAX = 0.08  # f/v: the lower lip at the upper teeth, never more open than this
REST_PULL = 0.01  # dominance of the rest everywhere: where no phone reaches, the mouth rests
GRID = 100  # the blend is computed at 10 ms steps, then averaged over each video frame
EMPHASIS = 0.15  # loudness scales a vowel's opening by at most this share either way
EMPHASIS_DB = 30.0  # dB above (below) the speech's running level for the full emphasis
LEVEL_RATE = 0.02  # per 10 ms step: how fast the running speech level follows the audio
LEAD = 0.04  # seconds the lips move ahead of the sound they shape, as real speakers' lips do


@dataclass(frozen=True)
class Phone:
    """One phone and where it lies in the audio, in seconds."""

    name: str
    start: float
    end: float


@dataclass(frozen=True)
class Viseme:
    """A phone's mouth target: ``openness``, the parted mouth's ``rounded`` and ``wide`` shares
    (the rest is a plain open mouth), how strongly it holds against its neighbours and how far
    (seconds) its influence reaches past its own interval."""

    openness: float
    rounded: float = 0.0
    wide: float = 0.0
    strength: float = 1.0
    reach: float = 0.05


REST = Viseme(REST_OPENNESS, strength=0.6, reach=0.06)
_BILABIAL = Viseme(0.0, strength=4.0, reach=0.03)
_LABIODENTAL = Viseme(LABIODENTAL_MAX, wide=0.6, strength=2.5, reach=0.03)
_ALVEOLAR = Viseme(0.16, wide=0.4, strength=0.5, reach=0.03)
_SIBILANT = Viseme(0.10, wide=0.6, strength=0.8, reach=0.03)
_POSTALVEOLAR = Viseme(0.14, rounded=0.7, strength=0.9, reach=0.04)
_VELAR = Viseme(0.24, strength=0.4, reach=0.03)

VISEMES: dict[str, Viseme] = {
    "P": _BILABIAL, "B": _BILABIAL, "M": _BILABIAL,
    "F": _LABIODENTAL, "V": _LABIODENTAL,
    "TH": Viseme(0.14, wide=0.3, strength=1.0, reach=0.03), "DH": Viseme(0.14, wide=0.3, strength=0.8, reach=0.03),
    "T": _ALVEOLAR, "D": _ALVEOLAR, "N": _ALVEOLAR, "L": Viseme(0.22, strength=0.5, reach=0.03),
    "S": _SIBILANT, "Z": _SIBILANT,
    "SH": _POSTALVEOLAR, "ZH": _POSTALVEOLAR, "CH": _POSTALVEOLAR, "JH": _POSTALVEOLAR,
    "K": _VELAR, "G": _VELAR, "NG": _VELAR, "HH": Viseme(0.3, strength=0.2, reach=0.03),
    "W": Viseme(0.10, rounded=1.0, strength=1.5, reach=0.08), "R": Viseme(0.16, rounded=0.7, strength=0.8, reach=0.06),
    "Y": Viseme(0.14, wide=0.9, strength=1.0, reach=0.04),
    "IY": Viseme(0.24, wide=0.9, reach=0.06), "IH": Viseme(0.36, wide=0.6, reach=0.05),
    "EY": Viseme(0.48, wide=0.6, reach=0.05), "EH": Viseme(0.6, wide=0.35, reach=0.05),
    "AE": Viseme(0.8, wide=0.35, reach=0.06), "AA": Viseme(0.95, reach=0.06), "AH": Viseme(0.58, reach=0.05),
    "AO": Viseme(0.78, rounded=0.5, reach=0.06), "AW": Viseme(0.82, rounded=0.4, reach=0.06),
    "AY": Viseme(0.85, wide=0.3, reach=0.06), "OW": Viseme(0.55, rounded=0.9, reach=0.07),
    "OY": Viseme(0.62, rounded=0.6, reach=0.06), "UH": Viseme(0.34, rounded=0.8, reach=0.06),
    "UW": Viseme(0.22, rounded=1.0, strength=1.5, reach=0.08), "ER": Viseme(0.34, rounded=0.6, reach=0.05),
}
BILABIALS = frozenset({"P", "B", "M"})
VOWELS = frozenset({"IY", "IH", "EY", "EH", "AE", "AA", "AH", "AO", "AW", "AY", "OW", "OY", "UH", "UW", "ER"})


def viseme(name: str) -> Viseme:
    """The target of a phone; silence, noise and unknown symbols rest."""
    return VISEMES.get(name.upper().rstrip("012"), REST)


def shape_weights(openness: np.ndarray, rounded: np.ndarray, wide: np.ndarray) -> np.ndarray:
    """(T, 4) weights in ``MOUTH_SHAPES`` order: the unparted share is ``closed``, the parted
    share (openness up to ``SHAPE_ONSET``) splits into open, rounded and wide."""
    parted = np.clip(openness / SHAPE_ONSET, 0.0, 1.0)
    rounded = np.clip(rounded, 0.0, 1.0)
    wide = np.clip(wide, 0.0, 1.0 - rounded)
    w = np.stack([1.0 - parted, parted * (1.0 - rounded - wide), parted * rounded, parted * wide], axis=1)
    return w.astype(np.float32)


def with_pauses(phones: list[Phone]) -> list[Phone]:
    """The phones in time order with every gap between them filled by a pause (``SIL``): the
    mouth rests between sentences, however far the last vowel's dominance would reach."""
    out: list[Phone] = []
    end = 0.0
    for p in sorted(phones, key=lambda p: p.start):
        if p.start > end:
            out.append(Phone("SIL", end, p.start))
        out.append(p)
        end = max(end, p.end)
    return out


REST_WEIGHTS = shape_weights(np.array([REST_OPENNESS]), np.zeros(1), np.zeros(1))[0]


def blend(phones: list[Phone], times: np.ndarray) -> np.ndarray:
    """(len(times), 3): openness, rounded and wide at each time (seconds), each phone's target
    weighted by its dominance there; past the last phone the mouth rests."""
    num = np.zeros((times.size, 3))
    den = np.full(times.size, REST_PULL)
    num[:, 0] = REST_OPENNESS * REST_PULL
    for p in with_pauses(phones):
        v = viseme(p.name)
        centre, half = 0.5 * (p.start + p.end), 0.5 * (p.end - p.start)
        lo, hi = np.searchsorted(times, [p.start - 5 * v.reach, p.end + 5 * v.reach])
        gap = np.maximum(np.abs(times[lo:hi] - centre) - half, 0.0)
        d = v.strength * np.exp(-gap / v.reach)
        num[lo:hi] += d[:, None] * np.array([v.openness, v.rounded, v.wide])
        den[lo:hi] += d
    return num / den[:, None]


def frame_values(phones: list[Phone], first: int, count: int, fps: int) -> np.ndarray:
    """(count, 3) blend averaged over each video frame ``first``..``first + count - 1`` (frame n
    covers [n/fps, (n+1)/fps)), with the bilabials' and labiodentals' constraints applied."""
    steps = max(1, round(GRID / fps))
    t = (first + (np.arange(count * steps) + 0.5) / steps) / fps
    grid = blend(phones, t)
    for p in phones:  # the lips are shut all through a bilabial's closure, at the teeth through f/v
        lo, hi = np.searchsorted(t, [p.start, p.end])
        if p.name.upper() in BILABIALS:
            grid[lo:hi] = 0.0
        elif p.name.upper() in ("F", "V"):
            grid[lo:hi, 0] = np.minimum(grid[lo:hi, 0], LABIODENTAL_MAX)
    values = grid.reshape(count, steps, 3).mean(axis=1)
    for p in phones:  # and for at least the frame holding its middle, however short it is
        name = p.name.upper()
        frame = int(np.floor(0.5 * (p.start + p.end) * fps)) - first
        if not 0 <= frame < count:
            continue
        if name in BILABIALS:
            values[frame] = 0.0
        elif name in ("F", "V"):
            values[frame, 0] = min(values[frame, 0], LABIODENTAL_MAX)
    return values


@dataclass
class Emphasis:
    """Loudness as emphasis only: a vowel louder than the speech's running level opens a little
    more, a quieter one a little less (never closed). Keeps one number between calls."""

    level_db: float = -20.0

    def gain(self, level_db: np.ndarray, speaking: np.ndarray) -> np.ndarray:
        out = np.ones(level_db.shape[0])
        for i, (db, on) in enumerate(zip(level_db.tolist(), speaking.tolist(), strict=True)):
            if on:
                self.level_db += LEVEL_RATE * (db - self.level_db)
                out[i] = 1.0 + EMPHASIS * float(np.clip((db - self.level_db) / EMPHASIS_DB, -1.0, 1.0))
        return out


def vowel_share(phones: list[Phone], first: int, count: int, fps: int) -> np.ndarray:
    """(count,) share of each video frame a vowel covers: where emphasis applies."""
    out = np.zeros(count)
    for p in phones:
        if p.name.upper().rstrip("012") not in VOWELS:
            continue
        lo, hi = p.start * fps - first, p.end * fps - first
        frames = np.arange(count)
        out += np.clip(np.minimum(frames + 1, hi) - np.maximum(frames, lo), 0.0, 1.0)
    return np.clip(out, 0.0, 1.0)


def mouth_values(phones: list[Phone], first: int, count: int, fps: int, level_db: np.ndarray | None = None,
                 emphasis: Emphasis | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Openness (count,) and shape weights (count, 4) of video frames ``first``.. from phones,
    each shaped ``LEAD`` before it sounds; ``level_db`` (count,), when given, lets loudness scale
    the vowels' opening a little."""
    phones = [Phone(p.name, max(p.start - LEAD, 0.0), max(p.end - LEAD, 0.0)) for p in phones]  # none before the audio
    values = frame_values(phones, first, count, fps)
    openness = values[:, 0]
    if level_db is not None:
        share = vowel_share(phones, first, count, fps)
        gain = (emphasis or Emphasis()).gain(np.asarray(level_db, np.float64), share > 0.5)
        openness = openness * (1.0 + share * (gain - 1.0))
    openness = np.clip(openness, 0.0, 1.0)
    return openness.astype(np.float32), shape_weights(openness, values[:, 1], values[:, 2])

