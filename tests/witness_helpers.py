"""A witness session: an ordinary client streaming the avatar from the same server while a test
attacks it, so the test can show what the attack costs everyone else (frames per second read
from the frames the client receives)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np
from server_helpers import Received, Running, admitted_session, collect, connect_client, wait_until

WITNESS_FPS = 24.0  # what a witness must keep (the stream runs at 25)


@dataclass
class Witness:
    session: dict
    video: Received

    def fps(self, since: float, until: float | None = None) -> float:
        """Frames received per second between two monotonic instants, from their arrival times and
        their media timestamps (the lower of the two: a stall shows in either)."""
        until = time.monotonic() if until is None else until
        arrival = np.asarray(self.video.arrival)
        pts = np.asarray(self.video.pts)
        inside = np.flatnonzero((arrival >= since) & (arrival < until))
        if inside.size < 2:
            return 0.0
        by_arrival = inside.size / (until - since)
        media_s = (pts[inside[-1]] - pts[inside[0]]) / 90_000
        by_pts = (inside.size - 1) / media_s if media_s > 0 else 0.0
        return min(by_arrival, by_pts)


@contextlib.asynccontextmanager
async def witness(srv: Running) -> AsyncIterator[Witness]:
    """A session with a connected client receiving video, already streaming when the block starts."""
    session = await admitted_session(srv)
    pc = await connect_client(srv, session, None)
    video, audio, stop = Received("video"), Received("audio"), asyncio.Event()
    readers = [asyncio.create_task(collect(r.track, video if r.track.kind == "video" else audio, stop, False))
               for r in pc.getReceivers() if r.track is not None]
    try:
        assert await wait_until(lambda: len(video.arrival) >= 50, 60), "the witness never streamed"
        yield Witness(session, video)
    finally:
        stop.set()
        await pc.close()
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
