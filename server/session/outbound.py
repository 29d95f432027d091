"""A session's video-out pipeline: what the avatar shows and says.

Frames come from the engine link (counted and recorded as generated), wait in the playout
buffer until their deadline, pass the voice gate (after an interrupt: the face fades to rest,
the voice is muted from the cut), and go out through one broadcast to the session's peer and
its WHEP viewers; each packet played is reported to the playback tracker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from server.base.metrics import ServerMetrics
from server.base.protocol import ServerEvent
from server.config import Settings
from server.media.broadcast import Broadcast
from server.media.clock import MonotonicClock
from server.media.outgoing import PlayoutAudio, PlayoutVideo
from server.media.playout import PlayoutBuffer, VideoOut
from server.media.recorder import MP4Recorder
from server.media.sync_probe import SyncProbe
from server.media.viewers import Viewers
from server.session.generated import GeneratedFrames
from server.session.liveness import Liveness
from server.session.playback_reporter import PlaybackReporter
from server.session.ports import EngineOutput
from server.session.trace import LatencyTrace
from server.voice.agent import AgentVoice
from server.voice.mute import MutedAudio
from server.voice.rest_face import RestingVideo


class Outbound:
    """Engine link -> generated frames (and the recording) -> playout -> rest face / muted voice
    -> broadcast to the peer and the viewers -> playback reporter.

    ``generated.frames`` counts what the engine handed over; ``playout.stats()`` what was played."""

    def __init__(
        self,
        session_id: str,
        settings: Settings,
        link: EngineOutput,
        voice: AgentVoice,
        connected: asyncio.Event,
        liveness: Liveness,
        trace: LatencyTrace,
        metrics: ServerMetrics,
        emit: Callable[[ServerEvent], None],
        on_viewer_connected: Callable[[], None],
        record_dir: Path | None,
    ) -> None:
        fps, sr = link.info.fps, link.info.sample_rate
        self._trace = trace
        self.playout = PlayoutBuffer(settings.playout(fps, sr), MonotonicClock())
        self.sync = SyncProbe(fps, 1000 // self.playout.config.audio_packet_ms)
        self.recorder = MP4Recorder(record_dir / f"{session_id}.mp4", fps, sr) if record_dir else None
        self.generated = GeneratedFrames(self.playout, self.recorder, connected, metrics, link.set_origin,
                                         trace.arrived)
        self.played = PlaybackReporter(session_id, sr, self.sync, voice.tracker, liveness, metrics, emit)
        self.resting = RestingVideo(self.playout, voice.gate, sr // fps, on_replaced=metrics.media.frames_rested.inc)
        self.broadcast = Broadcast(
            PlayoutVideo(self.resting, fps, self._video_played),
            PlayoutAudio(MutedAudio(self.playout, voice.gate), self.played.audio_played),
            fps, sr,
        )
        self.viewers = Viewers(self.broadcast, settings.ice_servers, sr, on_viewer_connected, settings.max_viewers)

    def _video_played(self, out: VideoOut) -> None:
        self._trace.released(time.monotonic(), out)
        self.played.video_played(out)
