"""What the engine generated for one session: counted, recorded, and handed to playout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from server.base.engine_port import PublishedFrame
from server.base.metrics import ServerMetrics
from server.media.playout import PlayoutBuffer, PlayoutClosed
from server.media.recorder import MP4Recorder


class GeneratedFrames:
    """The session's :class:`~server.base.engine_port.FrameSink`.

    Frames are recorded as generated (independent of playout), and reach playout only once the
    peer is connected, so the playout's t0 is the connection.
    """

    def __init__(
        self,
        playout: PlayoutBuffer,
        recorder: MP4Recorder | None,
        connected: asyncio.Event,
        metrics: ServerMetrics,
        on_origin: Callable[[float | None], None] = lambda _: None,
        on_arrived: Callable[[float, list[PublishedFrame]], None] = lambda t, frames: None,
    ) -> None:
        self._playout = playout
        self._on_origin = on_origin
        self._on_arrived = on_arrived
        self._recorder = recorder
        self._connected = connected
        self._metrics = metrics
        self.samples = 0  # timeline samples covered by the frames generated so far
        self.frames = 0  # frames handed to playout

    def on_generated(self, frames: list[PublishedFrame]) -> None:
        self._on_arrived(time.monotonic(), frames)
        last = frames[-1]
        self.samples = (last.index + 1) * last.sample_rate // last.fps
        if self._recorder is not None:
            for frame in frames:
                if not self._recorder.submit(frame):
                    self._metrics.media.recorder_frames_dropped.inc()

    async def put(self, frames: list[PublishedFrame]) -> None:
        await self._connected.wait()
        try:
            for frame in frames:
                await self._playout.put(frame)
                self.frames += 1
                self._metrics.media.frames_generated.inc()
        except PlayoutClosed:
            return
        self._on_origin(self._playout.frame_origin())  # the engine's deadlines follow playout
