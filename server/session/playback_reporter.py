"""What the outgoing tracks released, reported: the A/V probe, played counters, the first frame's
latency, and the ``playback.*`` events due when an utterance's frames play out."""

from __future__ import annotations

import logging
from collections.abc import Callable

from server.base.metrics import ServerMetrics
from server.base.protocol import ServerEvent
from server.media.playout import AudioOut, VideoOut
from server.media.sync_probe import SyncProbe
from server.session.liveness import Liveness
from server.voice.playback import PlaybackTracker

log = logging.getLogger(__name__)


class PlaybackReporter:
    """The tracks' ``on_played`` callbacks (event loop)."""

    def __init__(
        self,
        session_id: str,
        sample_rate: int,
        sync: SyncProbe,
        tracker: PlaybackTracker,
        liveness: Liveness,
        metrics: ServerMetrics,
        emit: Callable[[ServerEvent], None],
    ) -> None:
        self._id = session_id
        self._sample_rate = sample_rate
        self._sync = sync
        self._tracker = tracker
        self._liveness = liveness
        self._metrics = metrics
        self._emit = emit
        self.frames_shown = 0  # fresh video frames released (repeats and holds excluded)

    def audio_played(self, out: AudioOut) -> None:
        if not out.inserted:
            self._sync.released("audio", out.media_sample / self._sample_rate)

    def video_played(self, out: VideoOut) -> None:
        if not out.inserted:
            self._sync.released("video", float(out.pts))
        self._metrics.media.frames_played.inc()
        if not out.repeated:
            self.frames_shown += 1
        times = self._liveness
        now = times.first_frame()
        if now is not None and times.offered_at is not None:
            self._metrics.media.first_frame_seconds.observe(now - times.offered_at)
            log.info(
                "session %s: first frame %.2f s after the offer (connected after %.2f s; engine up %.2f s "
                "after creation, the offer came %.2f s after creation)",
                self._id,
                now - times.offered_at,
                (times.connected_at or now) - times.offered_at,
                (times.engine_started_at or now) - times.created_at,
                times.offered_at - times.created_at,
            )
        for event in self._tracker.on_played(out.media_slot):
            self._emit(event)
