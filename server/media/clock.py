"""Clocks for playout: the real monotonic one, and a manual one that makes deadline tests exact."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds plus a way to wait for a point in time on that same scale."""

    def now(self) -> float: ...

    async def sleep_until(self, t: float) -> None: ...


class MonotonicClock:
    """``time.monotonic`` (what asyncio's loop uses too), so wall-clock steps never move deadlines."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep_until(self, t: float) -> None:
        # asyncio may wake a hair early (its clock resolution); loop so callers never see now() < t.
        while (delay := t - time.monotonic()) > 0:
            await asyncio.sleep(delay)


class FakeClock:
    """Time that only moves when a test moves it, so releases happen at exactly the expected instants.

    ``advance(dt)`` jumps at once (sleepers wake and see the new time, as a stalled loop would).
    ``run_until(t)`` / ``run_for(dt)`` step from one sleeper's deadline to the next and let the
    event loop settle in between, so each woken task sees ``now() == its deadline``.
    """

    def __init__(self, start: float = 0.0, settle_rounds: int = 50) -> None:
        self._now = start
        self._settle_rounds = settle_rounds
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep_until(self, t: float) -> None:
        if t <= self._now:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (t, next(self._seq), fut))
        await fut

    def advance(self, dt: float) -> None:
        if dt < 0:
            raise ValueError("a monotonic clock cannot go back")
        self._now += dt
        self._wake()

    async def run_until(self, t: float) -> None:
        await self._settle()
        while True:
            self._purge()
            if not self._sleepers or self._sleepers[0][0] > t:
                break
            self._now = max(self._now, self._sleepers[0][0])
            self._wake()
            await self._settle()
        self._now = max(self._now, t)
        self._wake()
        await self._settle()

    async def run_for(self, dt: float) -> None:
        await self.run_until(self._now + dt)

    @property
    def sleepers(self) -> int:
        """How many waits are pending (cancelled ones excluded)."""
        return sum(1 for _, _, fut in self._sleepers if not fut.done())

    def _purge(self) -> None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)

    def _wake(self) -> None:
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    async def _settle(self) -> None:
        for _ in range(self._settle_rounds):
            await asyncio.sleep(0)
