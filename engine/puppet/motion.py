"""A whole face track from audio: mouth from the speech, plus the life around it.

Blinks, gaze shifts, head sway and nods are seeded random processes so a training clip
is reproducible; head motion is livelier while speaking, and in silence the face listens
(mouth closed, small nods). All processes are causal and drawn event by event, so a
prefix of the audio gives a prefix of the track (streaming and offline agree).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.puppet.mouth import mouth_track
from engine.puppet.state import FaceState

BLINK_GAP_S = (1.0, 2.0, 1.2)  # minimum gap, gamma shape, gamma scale: ~3.4 s mean, like people
NOD_GAP_S = (1.5, 3.0)  # minimum gap, exponential mean, for listening nods in silence
GAZE_GAP_S = (0.6, 2.5)  # uniform range between gaze shifts


def face_track_from_audio(pcm: np.ndarray, sample_rate: int, fps: int = 25, seed: int = 0) -> list[FaceState]:
    """One ``FaceState`` per video frame; frame n covers samples [n*sr/fps, (n+1)*sr/fps)."""
    mouth = mouth_track(pcm, sample_rate, fps)
    T = len(mouth)
    # One stream per process (event gaps separate from event details), so one draw never
    # shifts another and the track of a longer clip starts with the track of a shorter one.
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(8)]
    blink_gap, blink_kind, sway_rng, nod_gap, nod_kind, gaze_gap, gaze_kind, brow_rng = streams
    o = mouth.openness.astype(np.float64)
    active = _one_pole(o > 0.05, up=0.3, down=0.06)
    emphasis = np.maximum(_one_pole(o, 0.5, 0.5) - _one_pole(o, 0.08, 0.08), 0.0)
    t = np.arange(T) / fps

    idle = [_smooth_noise(sway_rng, t, 0.04, 0.25) for _ in range(5)]
    lively = [_smooth_noise(sway_rng, t, 0.3, 1.0) for _ in range(3)]
    nods = _listening_nods(nod_gap, nod_kind, active, fps)
    yaw = 0.05 * idle[0] + 0.07 * active * lively[0]
    pitch = 0.03 * idle[1] + 0.04 * active * lively[1] + 0.08 * emphasis + nods
    roll = 0.025 * idle[2] + 0.03 * active * lively[2]
    tx = 0.012 * idle[3]
    ty = 0.006 * idle[4] + 0.1 * nods
    brow = np.clip(0.15 * _smooth_noise(brow_rng, t, 0.05, 0.3) + 1.2 * emphasis + 2.0 * nods, -1.0, 1.0)
    blink = _blinks(blink_gap, blink_kind, T, fps)
    gaze_x, gaze_y = _gaze(gaze_gap, gaze_kind, active, fps)

    w = mouth.weights
    return [
        FaceState(
            openness=float(o[i]),
            closed=float(w[i, 0]),
            open=float(w[i, 1]),
            rounded=float(w[i, 2]),
            wide=float(w[i, 3]),
            blink=float(blink[i]),
            yaw=float(yaw[i]),
            pitch=float(pitch[i]),
            roll=float(roll[i]),
            tx=float(tx[i]),
            ty=float(ty[i]),
            brow=float(brow[i]),
            gaze_x=float(gaze_x[i]),
            gaze_y=float(gaze_y[i]),
        )
        for i in range(T)
    ]


def _one_pole(x: np.ndarray, up: float, down: float) -> np.ndarray:
    """Causal smoother with separate rise and fall rates per frame."""
    out = np.empty(x.shape[0], dtype=np.float64)
    y = 0.0
    for i, v in enumerate(np.asarray(x, dtype=np.float64).tolist()):
        y += (up if v > y else down) * (v - y)
        out[i] = y
    return out


def _smooth_noise(
    rng: np.random.Generator, t: np.ndarray, f_lo: float, f_hi: float, n: int = 4
) -> np.ndarray:
    """Unit-variance sum of ``n`` sinusoids with random frequencies in [f_lo, f_hi] Hz."""
    freqs = rng.uniform(f_lo, f_hi, n)
    phases = rng.uniform(0.0, 2 * np.pi, n)
    return np.sqrt(2.0 / n) * np.sin(2 * np.pi * freqs[None, :] * t[:, None] + phases[None, :]).sum(axis=1)


def _events(
    rng: np.random.Generator, n_frames: int, fps: int, gap: Callable[[np.random.Generator], float]
) -> list[int]:
    """Event start frames, gaps drawn one at a time so the sequence never depends on length."""
    times, t = [], gap(rng)
    while t * fps < n_frames:
        times.append(int(t * fps))
        t += gap(rng)
    return times


def _blinks(gaps: np.random.Generator, kinds: np.random.Generator, T: int, fps: int) -> np.ndarray:
    lo, shape, scale = BLINK_GAP_S
    out = np.zeros(T)
    for start in _events(gaps, T, fps, lambda r: lo + r.gamma(shape, scale)):
        double = kinds.random() < 0.12
        for onset in (start, start + int(0.35 * fps)) if double else (start,):
            tau = (np.arange(onset, min(onset + fps, T)) - onset + 0.5) / fps
            # Lids close in ~80 ms, stay shut ~40 ms and reopen over ~160 ms.
            lid = np.where(tau < 0.08, tau / 0.08, np.where(tau < 0.12, 1.0, 1.0 - (tau - 0.12) / 0.16))
            span = slice(onset, onset + tau.shape[0])
            out[span] = np.maximum(out[span], lid.clip(0.0, 1.0))
    return out


def _listening_nods(
    gaps: np.random.Generator, kinds: np.random.Generator, active: np.ndarray, fps: int
) -> np.ndarray:
    """Small down-up nods at random moments of silence: the avatar is listening, not frozen."""
    T = active.shape[0]
    lo, mean = NOD_GAP_S
    out = np.zeros(T)
    for start in _events(gaps, T, fps, lambda r: lo + r.exponential(mean)):
        amp = kinds.uniform(0.03, 0.07)
        count = 2 if kinds.random() < 0.3 else 1
        if active[start] > 0.15:
            continue
        dur = 0.8 * count
        tau = (np.arange(start, min(start + int(dur * fps) + 1, T)) - start) / fps
        out[start : start + tau.shape[0]] += amp * np.sin(np.pi * count * tau / dur) ** 2
    return out


def _gaze(
    gaps: np.random.Generator, kinds: np.random.Generator, active: np.ndarray, fps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Saccades: gaze jumps to a new target every second or two, more centred while speaking."""
    T = active.shape[0]
    target = np.zeros((T, 2))
    for start in _events(gaps, T, fps, lambda r: r.uniform(*GAZE_GAP_S)):
        target[start:] = kinds.normal(0.0, [0.3, 0.2])
    target *= (1.0 - 0.5 * active)[:, None]
    x = _one_pole(target[:, 0], 0.6, 0.6)
    y = _one_pole(target[:, 1], 0.6, 0.6)
    return np.clip(x, -1, 1), np.clip(y, -1, 1)
