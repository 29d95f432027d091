"""What the playout buffer's producer and consumers wait on: its start, room for a frame, its close."""

from __future__ import annotations

import asyncio

from server.media.clock import Clock
from server.media.playout.outputs import PlayoutClosed


class Waits:
    """Futures woken together, and the close that wakes them all; each wait raises
    :class:`PlayoutClosed` once the buffer is closed."""

    def __init__(self) -> None:
        self.closed = False
        self._closed_fut: asyncio.Future[None] | None = None  # made by the first sleep, set by close
        self._start: list[asyncio.Future[None]] = []
        self._space: list[asyncio.Future[None]] = []

    def check(self) -> None:
        if self.closed:
            raise PlayoutClosed("playout buffer is closed")

    async def for_start(self) -> None:
        """Once, until the first frame has arrived (or the buffer closes)."""
        await self._wait(self._start)

    async def for_space(self) -> None:
        """Once, until a frame has left the buffer (or the buffer closes)."""
        await self._wait(self._space)

    def started(self) -> None:
        self._wake(self._start)

    def space_freed(self) -> None:
        self._wake(self._space)

    async def sleep_until(self, clock: Clock, t: float) -> None:
        """Until clock time ``t``, or the close, whichever comes first."""
        if clock.now() < t:
            if self._closed_fut is None:
                self._closed_fut = asyncio.get_running_loop().create_future()
            sleeper = asyncio.ensure_future(clock.sleep_until(t))
            try:
                await asyncio.wait({sleeper, self._closed_fut}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not sleeper.done():
                    sleeper.cancel()
        self.check()

    def close(self) -> None:
        self.closed = True
        if self._closed_fut is not None and not self._closed_fut.done():
            self._closed_fut.set_result(None)
        self._wake(self._start)
        self._wake(self._space)

    @staticmethod
    async def _wait(waiters: list[asyncio.Future[None]]) -> None:
        fut = asyncio.get_running_loop().create_future()
        waiters.append(fut)
        await fut

    @staticmethod
    def _wake(waiters: list[asyncio.Future[None]]) -> None:
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        waiters.clear()
