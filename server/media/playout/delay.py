"""The playout delay L: when it rises, when it may shrink, and which L is in effect at an instant.

L only takes whole multiples of the quantum where the video and audio grids meet, and a new
L takes effect at such an instant for both tracks at once. An underrun raises the target by
a step and doubles how long production must then stay steady before L shrinks again, so L
stops probing its way back down into the same underrun; it shrinks only while recent frames
arrived early enough that a shorter L would still have been in time, and never below the L the
latest of them needed (plus a margin): L follows the measured production jitter down, faster
through silence, where the frames a shrink skips are not heard.
"""

from __future__ import annotations

import math
from collections import deque
from fractions import Fraction

from server.media.playout.config import EPS, PlayoutConfig


class DelayController:
    """L over time, as changes scheduled on the quantum grid; instants are relative to t0."""

    def __init__(self, config: PlayoutConfig) -> None:
        self.config = config
        self._quantum = config.quantum
        self._frame_period = config.frame_period
        q = float(self._quantum)
        self._q_min = math.ceil(config.min_delay / q - EPS)
        self._q_max = max(self._q_min, math.floor(config.max_delay / q + EPS))
        self.target = config.initial_delay  # what the adaptation aims at; L is this rounded up to the quantum
        # (instant, L in quanta from then on); instants are on the quantum grid.
        self._changes: deque[tuple[Fraction, int]] = deque([(Fraction(0), self.quanta(self.target))], maxlen=16)
        self._last_miss = 0.0
        self._steady_s = config.steady_after_s
        self._last_decay = 0.0
        # Sliding-window minimum of (media time - arrival time) of recent frames: the evidence
        # that a shorter L would still have been in time.
        self._early: deque[tuple[float, float]] = deque()

    def quanta(self, delay: float) -> int:
        return min(self._q_max, max(self._q_min, math.ceil(delay / float(self._quantum) - EPS)))

    def delay_q(self, w: Fraction | float) -> int:
        """L (in quanta) in effect at instant w."""
        for start, q in reversed(self._changes):
            if float(start) <= float(w) + EPS:
                return q
        return self._changes[0][1]

    def delay_s(self, w: Fraction | float) -> float:
        return float(self.delay_q(w) * self._quantum)

    @property
    def at_max(self) -> bool:
        """Raising L cannot help any more."""
        return self.quanta(self.target) >= self._q_max

    def missed(self, w: float) -> None:
        """A frame was dropped or missing at instant w: no shrinking for a while after it."""
        self._last_miss = w

    def underrun(self, w: Fraction, released_w: Fraction) -> None:
        """The video slot at w had no frame: raise L (from after everything already released)."""
        cfg = self.config
        self._last_miss = float(w)
        self._steady_s = min(max(cfg.steady_max_s, cfg.steady_after_s), 2 * self._steady_s)
        self.target = min(cfg.max_delay, self.target + cfg.raise_step)
        self._schedule(w, released_w)

    def shown(self, w: Fraction, released_w: Fraction, quiet: bool = False) -> None:
        """A fresh frame played at w: shrink L once production has been steady and had room,
        slowly while the face speaks, faster while it is ``quiet`` (silent frames skipped are
        not heard, and an idle face moves little)."""
        cfg = self.config
        now = float(w)
        since = max(self._last_decay, self._last_miss + self._steady_s)
        self._last_decay = now
        if now <= since:
            return
        needed = self._needed(now)
        if needed is None:
            return
        rate = cfg.quiet_decay_per_s if quiet else cfg.decay_per_s
        shrunk = max(cfg.min_delay, needed, self.target - rate * (now - since))
        if shrunk < self.target:
            self.target = shrunk
            self._schedule(w, released_w)

    def arrived(self, slot: int, now: float) -> None:
        """A frame for playout ``slot`` arrived at instant ``now``."""
        ahead = float(slot * self._frame_period) - now
        while self._early and self._early[-1][1] >= ahead:
            self._early.pop()
        self._early.append((now, ahead))

    def forget_arrivals(self) -> None:
        """The timeline was re-based: earlier arrivals say nothing about the new one."""
        self._early.clear()

    def _schedule(self, w: Fraction, released_w: Fraction) -> None:
        """Let L follow the target from the next quantum instant after w, for both tracks alike.

        The instant also lies after everything either track has released already (a consumer
        may be ahead of the other by its late tolerance), so both switch at the same instant.
        """
        q = self.quanta(self.target)
        if q == self._changes[-1][1]:
            return
        at = (math.floor(max(w, released_w) / self._quantum) + 1) * self._quantum
        if self._changes[-1][0] == at:
            self._changes.pop()
        self._changes.append((at, q))

    def _needed(self, now: float) -> float | None:
        """The shortest L that would have had every frame of the steady window in time with the
        jitter margin to spare (None before any arrival): the measured jitter L follows down."""
        early = self._early
        while early and early[0][0] < now - self._steady_s:
            early.popleft()
        if not early:
            return None
        return self.config.jitter_margin - early[0][1]
