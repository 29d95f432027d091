"""The playout's pacing and adaptation knobs, and the grids they imply."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

# Tolerance when comparing float clock readings with exact (Fraction) grid instants.
EPS = 1e-9


@dataclass(frozen=True)
class PlayoutConfig:
    """Pacing and adaptation knobs; delays in seconds."""

    fps: int = 25
    sample_rate: int = 16000
    audio_packet_ms: int = 20
    initial_delay: float = 0.25
    # L never below this; above it, what the measured jitter needs plus ``jitter_margin`` decides.
    min_delay: float = 0.04
    jitter_margin: float = 0.02  # added to what the window's arrivals needed (L is then on the quantum grid)
    max_delay: float = 1.5
    raise_step: float = 0.04  # added to L at an underrun (the late frame then raises it to what it needed)
    decay_per_s: float = 0.1  # L shrinks at most this much per second of steady production ...
    quiet_decay_per_s: float = 0.5  # ... or this much while the frames played are silent (skipping them is not heard)
    quiet_level: float = 0.01  # a frame whose audio peaks below this (of full scale) is silent
    steady_after_s: float = 3.0  # no miss for this long before L may shrink; the window of arrivals L heeds ...
    steady_max_s: float = 60.0  # ... starts as long and doubles after each underrun, up to this
    # The share of a window's frames whose lateness L need not cover: one slow chunk a minute on a
    # loaded machine is a frame or two missed, cheaper than a delay raised for the whole call.
    miss_budget: float = 0.002
    capacity_frames: int = 150
    # A consumer this late still gets every slot (back to back); later than this it skips ahead.
    audio_late_tolerance_s: float = 0.2
    video_late_tolerance_s: float | None = None  # None: one frame period
    # Resync after this many late arrivals in a row while L is already at its maximum.
    resync_after_late: int = 5
    # Video starts at t0 with the first frame, held until the timeline reaches it L later (audio
    # with silence, so both tracks start at one instant): the viewer sees the face a playout
    # delay sooner, and the stream's cadence is steady from t0.
    preview: bool = False

    def __post_init__(self) -> None:
        if self.fps <= 0 or self.sample_rate <= 0 or self.audio_packet_ms <= 0:
            raise ValueError("fps, sample_rate and audio_packet_ms must be positive")
        if (self.sample_rate * self.audio_packet_ms) % 1000:
            raise ValueError("an audio packet must hold a whole number of samples")
        if not 0 <= self.min_delay <= self.initial_delay <= self.max_delay:
            raise ValueError("need 0 <= min_delay <= initial_delay <= max_delay")
        if float(self.quantum) > self.max_delay + EPS:
            raise ValueError(f"max_delay is below this rate's {float(self.quantum):.3f}s delay quantum")
        if self.capacity_frames < 1:
            raise ValueError("capacity_frames must be at least 1")
        if min(self.raise_step, self.decay_per_s, self.quiet_decay_per_s, self.steady_after_s, self.quiet_level,
               self.jitter_margin, self.miss_budget) < 0:
            raise ValueError("raise_step, decay_per_s, quiet_decay_per_s, steady_after_s, quiet_level, "
                             "jitter_margin and miss_budget must not be negative")
        if self.audio_late_tolerance_s < 0 or (self.video_late_tolerance_s or 0) < 0:
            raise ValueError("late tolerances must not be negative")
        if self.resync_after_late < 1:
            raise ValueError("resync_after_late must be at least 1")

    @functools.cached_property
    def frame_period(self) -> Fraction:
        return Fraction(1, self.fps)

    @functools.cached_property
    def packet_period(self) -> Fraction:
        return Fraction(self.audio_packet_ms, 1000)

    @functools.cached_property
    def packet_samples(self) -> int:
        return self.sample_rate * self.audio_packet_ms // 1000

    @functools.cached_property
    def quantum(self) -> Fraction:
        """Smallest step of L that keeps both grids whole: lcm of frame and packet period."""
        f, p = self.frame_period, self.packet_period
        return Fraction(math.lcm(f.numerator, p.numerator), math.gcd(f.denominator, p.denominator))

    @functools.cached_property
    def frames_per_quantum(self) -> int:
        return int(self.quantum / self.frame_period)

    @functools.cached_property
    def packets_per_quantum(self) -> int:
        return int(self.quantum / self.packet_period)

    @functools.cached_property
    def video_tolerance(self) -> float:
        tol = self.video_late_tolerance_s
        return float(self.frame_period) if tol is None else tol
