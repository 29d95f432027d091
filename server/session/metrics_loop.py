"""The once-a-second ``metrics`` event of one session, and the server-wide deadline-miss counter."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from server.base.metrics import ServerMetrics
from server.base.protocol import MetricsEvent, ServerEvent
from server.media.microphone import MicrophoneIntake
from server.media.playout import PlayoutBuffer
from server.media.sync_probe import SyncProbe
from server.session.feeder import Feeder
from server.session.generated import GeneratedFrames
from server.session.playback_reporter import PlaybackReporter


class MetricsLoop:
    """Snapshots the session's figures every ``interval_s`` and emits them."""

    def __init__(
        self,
        playout: PlayoutBuffer,
        sync: SyncProbe,
        feeder: Feeder,
        generated: GeneratedFrames,
        engine_bytes: Callable[[], int],
        microphone: MicrophoneIntake,
        played: PlaybackReporter,
        metrics: ServerMetrics,
        emit: Callable[[ServerEvent], None],
        interval_s: float,
    ) -> None:
        self._playout = playout
        self._sync = sync
        self._feeder = feeder
        self._generated = generated
        self._engine_bytes = engine_bytes  # what the engine holds between chunks
        self._microphone = microphone
        self._played = played
        self._metrics = metrics
        self._emit = emit
        self._interval_s = interval_s
        self._reported_misses = 0

    def snapshot(self, fps: float) -> MetricsEvent:
        stats = self._playout.stats()
        rate = self._feeder.sample_rate
        backlog = max(0, self._feeder.fed - self._generated.samples)
        offset = stats.av_offset if self._sync.offset_s is None else self._sync.offset_s
        return MetricsEvent(
            fps=round(fps, 2),
            playout_delay_ms=round(stats.delay * 1000, 1),
            buffer_depth=stats.depth,
            deadline_misses=stats.deadline_misses,
            frames_played=stats.frames_shown,
            frames_generated=self._generated.frames,
            engine_backlog_ms=round(backlog * 1000 / rate, 1),
            av_offset_ms=round(1000 * offset, 1),
            mic_seconds=round(self._microphone.samples / rate, 2),
            mic_buffer_ms=round(len(self._feeder.mic) * 1000 / rate, 1),
            mic_underruns=self._feeder.jitter.underruns,
            engine_state_bytes=self._engine_bytes(),
        )

    async def run(self) -> None:
        last_shown, last_t = self._played.frames_shown, time.monotonic()
        while True:
            await asyncio.sleep(self._interval_s)
            now = time.monotonic()
            event = self.snapshot((self._played.frames_shown - last_shown) / (now - last_t))
            last_shown, last_t = self._played.frames_shown, now
            self._metrics.media.deadline_misses.inc(event.deadline_misses - self._reported_misses)
            self._reported_misses = event.deadline_misses
            self._emit(event)
