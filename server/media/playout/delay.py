"""The playout delay L: when it rises, when it may shrink, and which L is in effect at an instant.

L only takes whole multiples of the quantum where the video and audio grids meet, and a new
L takes effect at such an instant for both tracks at once. An underrun raises the target by a
step at once, and the late frame, when it comes, raises it to what that frame needed. L
remembers the arrivals of a window that doubles after each underrun, so it stops probing its way
back down into the same underrun; it shrinks only while that window's frames arrived early
enough that a shorter L would still have had them in time, all but a small budget of them (a
loaded machine's rare slow chunk costs a frame or two once a minute, not a quarter second of
delay for the whole call), and never below what they needed plus a margin: L follows the
measured production jitter down, faster through silence, where the frames a shrink skips are
not heard.
"""

from __future__ import annotations

import bisect
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
        self._memory_s = config.steady_after_s  # how far back arrivals count (doubles after each underrun)
        self._last_decay = 0.0
        # (arrival instant, media time - arrival time) of the window's frames, in arrival order and
        # the second sorted: the evidence that a shorter L would still have been in time.
        self._arrivals: deque[tuple[float, float]] = deque()
        self._ahead: list[float] = []

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
        """The video slot at w had no frame: raise L by a step (from after everything already
        released) and remember arrivals longer."""
        cfg = self.config
        self._last_miss = float(w)
        self._memory_s = min(max(cfg.steady_max_s, cfg.steady_after_s), 2 * self._memory_s)
        self.target = min(cfg.max_delay, self.target + cfg.raise_step)
        self._schedule(w, released_w)

    def arrived_late(self, slot: int, now: float, released_w: Fraction) -> None:
        """A frame for ``slot`` came at ``now``, after its slot was played: remember it, and raise
        L to what it needed unless the window's miss budget covers it."""
        self.arrived(slot, now)
        needed = self._needed(now)
        if needed is not None and needed > self.target:
            self.target = min(self.config.max_delay, needed)
            self._schedule(Fraction(now), released_w)

    def shown(self, w: Fraction, released_w: Fraction, quiet: bool = False) -> None:
        """A fresh frame played at w: shrink L once production has been steady and had room,
        slowly while the face speaks, faster while it is ``quiet`` (silent frames skipped are
        not heard, and an idle face moves little)."""
        cfg = self.config
        now = float(w)
        since = max(self._last_decay, self._last_miss + cfg.steady_after_s)
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
        self._arrivals.append((now, ahead))
        bisect.insort(self._ahead, ahead)
        self._forget_before(now - self._memory_s)

    def forget_arrivals(self) -> None:
        """The timeline was re-based: earlier arrivals say nothing about the new one."""
        self._arrivals.clear()
        self._ahead.clear()

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
        """The shortest L that would have had the window's frames in time with the jitter margin
        to spare, all but ``miss_budget`` of them (None before any arrival): the measured jitter
        L follows down."""
        self._forget_before(now - self._memory_s)
        ahead = self._ahead
        if not ahead:
            return None
        spared = math.floor(self.config.miss_budget * len(ahead) + EPS)
        return self.config.jitter_margin - ahead[min(spared, len(ahead) - 1)]

    def _forget_before(self, instant: float) -> None:
        while self._arrivals and self._arrivals[0][0] < instant:
            del self._ahead[bisect.bisect_left(self._ahead, self._arrivals.popleft()[1])]
