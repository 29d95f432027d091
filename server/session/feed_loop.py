"""The task that feeds one session's engine in real time, tick by tick."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import numpy as np

from server.base.engine_port import EngineInput
from server.base.protocol import ErrorEvent, ServerEvent
from server.session.feeder import Feeder
from server.voice.playback import PlaybackTracker

log = logging.getLogger(__name__)


class FeedLoop:
    """Each tick: the audio wall time made due goes to the engine, and the tracker learns where
    each utterance sits on the timeline. Reports an overloaded engine once."""

    def __init__(
        self,
        session_id: str,
        feeder: Feeder,
        link: EngineInput,
        generated_samples: Callable[[], int],
        tracker: PlaybackTracker,
        emit: Callable[[ServerEvent], None],
        tick_s: float,
        on_fed: Callable[[float, int, np.ndarray], None] = lambda t, start, samples: None,
    ) -> None:
        self._id = session_id
        self._feeder = feeder
        self._link = link
        self._generated_samples = generated_samples  # timeline samples the engine has turned into frames
        self._tracker = tracker
        self._emit = emit
        self._tick_s = tick_s
        self._on_fed = on_fed  # (clock time, first timeline sample, samples) of each block fed
        self._overload_reported = False

    async def run(self) -> None:
        feeder = self._feeder
        while True:
            now = time.monotonic()
            generated = self._generated_samples()
            block = feeder.tick(now, generated)
            if block.skipped and not self._overload_reported:
                self._overload_reported = True
                log.warning(
                    "session %s: engine %.1f s behind, skipping input",
                    self._id,
                    (feeder.fed - generated) / feeder.sample_rate,
                )
                self._emit(
                    ErrorEvent(
                        code="engine_overloaded",
                        message="the engine is slower than real time on this machine; audio is being skipped",
                    )
                )
            if block.samples.size:
                for seg in block.segments:
                    if seg.first:
                        self._tracker.begin(seg.utterance_id, block.start + seg.start)
                    if seg.end > seg.start:
                        self._tracker.fed(seg.utterance_id, block.start + seg.end)
                    if seg.last:
                        self._tracker.end(seg.utterance_id)
                self._link.feed(block.start, block.samples)
                self._on_fed(now, block.start, block.samples)
            await asyncio.sleep(feeder.next_tick(time.monotonic(), self._tick_s))
