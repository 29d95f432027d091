"""How much of its event loop thread a web process uses: the signal that it holds as many
sessions as its loop can serve.

Every session's WebRTC work that Python does on the loop (packetising, the playout clock, the
control socket, RTCP) is CPU time of the loop's thread. ``LoopLoad`` samples that thread's CPU
time and reports the share of wall time it was busy over the last ``window_s``. A web process
whose loop is near full cannot play one more session on time however much room the engine has,
so admission asks :meth:`room` as well as the engine.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable

# What one more session is assumed to cost the loop at least, before it is measured: a 256²
# session measured about 0.02-0.05 of the loop thread here (``bench/web_side.py``).
MIN_SESSION_SHARE = 0.01
UNBOUNDED = 1 << 30


class LoopLoad:
    def __init__(self, budget: float, window_s: float = 5.0, interval_s: float = 0.25,
                 clock: Callable[[], float] = time.monotonic, cpu: Callable[[], float] = time.thread_time) -> None:
        self.budget = budget  # share of the loop thread a web process fills before refusing sessions
        self.window_s = window_s
        self.interval_s = interval_s
        self._clock = clock
        self._cpu = cpu  # CPU seconds of the calling thread
        self._samples: deque[tuple[float, float]] = deque()  # (clock, loop thread CPU seconds)

    def sample(self) -> None:
        """Record the loop thread's CPU time now; call on the loop thread."""
        now = self._clock()
        self._samples.append((now, self._cpu()))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()

    @property
    def busy(self) -> float:
        """Share of the last window the loop thread spent on the CPU (0 before two samples)."""
        if len(self._samples) < 2:
            return 0.0
        (t0, c0), (t1, c1) = self._samples[0], self._samples[-1]
        return max(0.0, (c1 - c0) / (t1 - t0)) if t1 > t0 else 0.0

    def room(self, sessions: int) -> int:
        """More sessions the loop can take within its budget at the measured cost per session; a
        loop with no session always takes one, and a budget of the whole loop (1) never refuses."""
        if self.budget >= 1.0:
            return UNBOUNDED
        if sessions == 0:
            return max(1, self._room(self.busy, MIN_SESSION_SHARE))
        return self._room(self.busy, max(self.busy / sessions, MIN_SESSION_SHARE))

    def _room(self, busy: float, per_session: float) -> int:
        return max(0, math.floor((self.budget - busy) / per_session))

    async def run(self) -> None:
        """Sample until cancelled."""
        while True:
            self.sample()
            await asyncio.sleep(self.interval_s)
