"""The life around the mouth: blinks, gaze shifts, head sway and nods, one frame at a time.

Blinks, gaze shifts, head sway and nods are seeded random processes so a training clip
is reproducible; head motion is livelier while speaking, and in silence the face listens
(mouth closed, small nods). Every process is causal and drawn event by event, and
``FaceAnimator`` carries only constant-size state between frames: filter values, random
generators, the time of each process's next event and the events still running. So a
stream and its whole file give the same track (``engine.puppet.stream``), however the
audio is split.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.puppet.smoother import Smoother
from engine.puppet.state import FaceState

BLINK_GAP_S = (1.0, 2.0, 1.2)  # minimum gap, gamma shape, gamma scale: ~3.4 s mean, like people
NOD_GAP_S = (1.5, 3.0)  # minimum gap, exponential mean, for listening nods in silence
GAZE_GAP_S = (0.6, 2.5)  # uniform range between gaze shifts
SPEAKING = 0.05  # mouth openness above which a frame counts as speech


def _blink_gap(rng: np.random.Generator) -> float:
    lo, shape, scale = BLINK_GAP_S
    return lo + rng.gamma(shape, scale)


def _nod_gap(rng: np.random.Generator) -> float:
    lo, mean = NOD_GAP_S
    return lo + rng.exponential(mean)


def _gaze_gap(rng: np.random.Generator) -> float:
    return rng.uniform(*GAZE_GAP_S)


@dataclass
class EventClock:
    """Event start times of a renewal process, drawn one gap at a time so the sequence never
    depends on how long the clip is; only the next event's time is kept."""

    rng: np.random.Generator
    gap: Callable[[np.random.Generator], float]
    fps: int
    next_time: float = field(init=False)

    def __post_init__(self) -> None:
        self.next_time = self.gap(self.rng)

    def starts(self, n: int) -> int:
        """How many events start at frame ``n``; frames must be asked for in order."""
        count = 0
        while self.next_time * self.fps < n + 1:
            count += 1
            self.next_time += self.gap(self.rng)
        return count


@dataclass
class Tails:
    """Events whose effect is still running, in a fixed number of slots so the state never grows.

    A row is (start frame, end frame, *parameters); a row whose end has passed is free.
    """

    slots: int
    params: int = 0
    rows: list[tuple[float, ...]] = field(init=False)

    def __post_init__(self) -> None:
        self.rows = [(-1.0,) * (2 + self.params)] * self.slots

    def add(self, now: int, start: int, end: int, *params: float) -> None:
        for i, row in enumerate(self.rows):
            if row[1] <= now:
                self.rows[i] = (float(start), float(end), *(float(p) for p in params))
                return
        raise RuntimeError(f"more than {self.slots} overlapping events")

    def live(self, n: int) -> list[tuple[float, ...]]:
        """Rows of the events acting on frame ``n``, oldest first."""
        return sorted((row for row in self.rows if row[0] <= n < row[1]), key=lambda row: row[0])


@dataclass(frozen=True)
class SmoothNoise:
    """Unit-variance sums of ``n`` sinusoids with random frequencies in [f_lo, f_hi] Hz, one per
    row, evaluated at absolute time: nothing to carry but the draws."""

    omega: np.ndarray  # (rows, n) angular frequencies
    phase: np.ndarray  # (rows, n)

    @classmethod
    def draw(cls, rng: np.random.Generator, bands: list[tuple[float, float]], n: int = 4) -> SmoothNoise:
        omega, phase = [], []
        for f_lo, f_hi in bands:
            omega.append(2 * np.pi * rng.uniform(f_lo, f_hi, n))
            phase.append(rng.uniform(0.0, 2 * np.pi, n))
        return cls(np.array(omega), np.array(phase))

    def __call__(self, t: float) -> list[float]:
        n = self.omega.shape[1]
        return (np.sqrt(2.0 / n) * np.sin(self.omega * t + self.phase).sum(axis=1)).tolist()


@dataclass
class Blinks:
    """Lids close in ~80 ms, stay shut ~40 ms and reopen over ~160 ms; some blinks come in pairs."""

    clock: EventClock
    kinds: np.random.Generator
    # Blinks are >= 1 s apart and a lid movement lasts 1 s: at most three are ever pending or running.
    tails: Tails = field(default_factory=lambda: Tails(4))

    def step(self, n: int) -> float:
        fps = self.clock.fps
        for _ in range(self.clock.starts(n)):
            double = self.kinds.random() < 0.12
            for onset in (n, n + int(0.35 * fps)) if double else (n,):
                self.tails.add(n, onset, onset + fps)
        lid = 0.0
        for onset, _end in self.tails.live(n):
            tau = (n - onset + 0.5) / fps
            shut = tau / 0.08 if tau < 0.08 else 1.0 if tau < 0.12 else 1.0 - (tau - 0.12) / 0.16
            lid = max(lid, min(max(shut, 0.0), 1.0))
        return lid


@dataclass
class ListeningNods:
    """Small down-up nods at random moments of silence: the avatar is listening, not frozen."""

    clock: EventClock
    kinds: np.random.Generator
    # Nods are >= 1.5 s apart and last at most 1.64 s: at most two overlap. Row: start, end, amp, count.
    tails: Tails = field(default_factory=lambda: Tails(3, params=2))

    def step(self, n: int, active: float) -> float:
        fps = self.clock.fps
        for _ in range(self.clock.starts(n)):
            amp = self.kinds.uniform(0.03, 0.07)
            count = 2 if self.kinds.random() < 0.3 else 1
            if active <= 0.15:  # speaking: the nod is drawn (keeping the streams aligned) but skipped
                self.tails.add(n, n, n + int(0.8 * count * fps) + 1, amp, count)
        nod = 0.0
        for start, _end, amp, count in self.tails.live(n):
            tau = (n - start) / fps
            nod += amp * np.sin(np.pi * count * tau / (0.8 * count)) ** 2
        return float(nod)


@dataclass
class Gaze:
    """Saccades: gaze jumps to a new target every second or two, more centred while speaking."""

    clock: EventClock
    kinds: np.random.Generator
    target: tuple[float, float] = (0.0, 0.0)
    x: Smoother = field(default_factory=lambda: Smoother(0.6, 0.6))
    y: Smoother = field(default_factory=lambda: Smoother(0.6, 0.6))

    def step(self, n: int, active: float) -> tuple[float, float]:
        for _ in range(self.clock.starts(n)):
            tx, ty = self.kinds.normal(0.0, [0.3, 0.2]).tolist()
            self.target = (tx, ty)
        centre = 1.0 - 0.5 * active
        x = self.x.step(self.target[0] * centre)
        y = self.y.step(self.target[1] * centre)
        return min(max(x, -1.0), 1.0), min(max(y, -1.0), 1.0)


@dataclass
class FaceAnimator:
    """Each frame's mouth (openness and shape weights, from ``engine.puppet.mouth``) to its full
    ``FaceState``; frames must come in order, from frame 0."""

    fps: int = 25
    seed: int = 0
    frame: int = field(default=0, init=False)
    active: Smoother = field(default_factory=lambda: Smoother(0.3, 0.06), init=False)  # speaking, smoothed
    fast: Smoother = field(default_factory=lambda: Smoother(0.5, 0.5), init=False)
    slow: Smoother = field(default_factory=lambda: Smoother(0.08, 0.08), init=False)  # fast - slow: emphasis
    noise: SmoothNoise = field(init=False)  # 5 idle sways, 3 lively ones, the brow's drift
    blinks: Blinks = field(init=False)
    nods: ListeningNods = field(init=False)
    gaze: Gaze = field(init=False)

    def __post_init__(self) -> None:
        # One stream per process (event gaps separate from event details), so one draw never
        # shifts another and the track of a longer clip starts with the track of a shorter one.
        streams = [np.random.default_rng(s) for s in np.random.SeedSequence(self.seed).spawn(8)]
        blink_gap, blink_kind, sway_rng, nod_gap, nod_kind, gaze_gap, gaze_kind, brow_rng = streams
        sway = SmoothNoise.draw(sway_rng, [(0.04, 0.25)] * 5 + [(0.3, 1.0)] * 3)
        brow = SmoothNoise.draw(brow_rng, [(0.05, 0.3)])
        self.noise = SmoothNoise(np.concatenate([sway.omega, brow.omega]), np.concatenate([sway.phase, brow.phase]))
        self.blinks = Blinks(EventClock(blink_gap, _blink_gap, self.fps), blink_kind)
        self.nods = ListeningNods(EventClock(nod_gap, _nod_gap, self.fps), nod_kind)
        self.gaze = Gaze(EventClock(gaze_gap, _gaze_gap, self.fps), gaze_kind)

    def step(self, openness: float, weights: np.ndarray) -> FaceState:
        n = self.frame
        self.frame += 1
        active = self.active.step(1.0 if openness > SPEAKING else 0.0)
        emphasis = max(self.fast.step(openness) - self.slow.step(openness), 0.0)
        i0, i1, i2, i3, i4, l0, l1, l2, drift = self.noise(n / self.fps)
        nods = self.nods.step(n, active)
        gaze_x, gaze_y = self.gaze.step(n, active)
        closed, open_, rounded, wide = np.asarray(weights).tolist()
        return FaceState(
            openness=openness,
            closed=closed,
            open=open_,
            rounded=rounded,
            wide=wide,
            blink=self.blinks.step(n),
            yaw=0.05 * i0 + 0.07 * active * l0,
            pitch=0.03 * i1 + 0.04 * active * l1 + 0.08 * emphasis + nods,
            roll=0.025 * i2 + 0.03 * active * l2,
            tx=0.012 * i3,
            ty=0.006 * i4 + 0.1 * nods,
            brow=min(max(0.15 * drift + 1.2 * emphasis + 2.0 * nods, -1.0), 1.0),
            gaze_x=gaze_x,
            gaze_y=gaze_y,
        )
