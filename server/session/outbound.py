"""A session's video-out pipeline: what the avatar shows and says.

Frames come from the engine, delivered by the pipeline's one frame pump (:meth:`Outbound.pump`)
to the generated frames (counted and recorded as generated); they wait in the playout
buffer until their deadline, pass the voice gate (after an interrupt: the face fades to rest,
the voice is muted from the cut), and go out through one broadcast to the session's peer and
its WHEP viewers; each packet played is reported to the playback tracker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from server.base.engine_port import EngineOutput, QualityChange
from server.base.local_engine import Mp4Sink
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
from server.session.trace import LatencyTrace
from server.voice.agent import AgentVoice
from server.voice.mute import MutedAudio
from server.voice.rest_face import RestingVideo


class Outbound:
    """Engine -> generated frames (and the recording) -> playout -> rest face / muted voice
    -> broadcast to the peer and the viewers -> playback reporter.

    ``generated.frames`` counts what the engine handed over; ``playout.stats()`` what was played.
    The pipeline owns its end of the engine: its frames, its quality changes, and closing it."""

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
        mp4_writer: Callable[[Path, int, int, int, int], Mp4Sink] | None = None,
    ) -> None:
        fps, sr = link.info.fps, link.info.sample_rate
        self.engine = link
        self._trace = trace
        self.playout = PlayoutBuffer(settings.jitter.playout(fps, sr), MonotonicClock())
        self.sync = SyncProbe(fps, 1000 // self.playout.config.audio_packet_ms)
        self.recorder = None
        if record_dir is not None and mp4_writer is not None:
            self.recorder = MP4Recorder(record_dir / f"{session_id}.mp4", mp4_writer, fps, sr)
        self.generated = GeneratedFrames(self.playout, self.recorder, connected, metrics, link.set_origin,
                                         trace.arrived)
        self.played = PlaybackReporter(session_id, sr, self.sync, voice.tracker, liveness, metrics, emit)
        self.resting = RestingVideo(self.playout, voice.gate, sr // fps, on_replaced=metrics.media.frames_rested.inc)
        self.broadcast = Broadcast(
            PlayoutVideo(self.resting, fps, self._video_played),
            PlayoutAudio(MutedAudio(self.playout, voice.gate), self.played.audio_played),
            fps, sr,
        )
        self.viewers = Viewers(self.broadcast, settings.network.ice_servers, sr, on_viewer_connected,
                               settings.limits.max_viewers)

    @property
    def fps(self) -> int:
        return self.engine.info.fps

    @property
    def sample_rate(self) -> int:
        return self.engine.info.sample_rate

    @property
    def frame_size(self) -> tuple[int, int]:
        """(height, width) of the frames the engine draws."""
        return self.engine.frame_size

    async def pump(self) -> None:
        """The engine's frames into the pipeline as they come, for the session's life; raises
        :class:`~server.base.engine_port.EngineError` if the engine loses the session."""
        await self.engine.deliver(self.generated)

    async def quality_changes(self, on_change: Callable[[QualityChange], None]) -> None:
        await self.engine.quality_changes(on_change)

    def engine_bytes(self) -> int:
        """Bytes the engine holds between chunks for this session."""
        return self.engine.nbytes()

    async def close_engine(self) -> None:
        """Playout stops taking frames and the engine session closes."""
        self.playout.close()
        await self.engine.close()

    async def close_recording(self) -> None:
        """The recording finished (off the event loop), if the session records."""
        if self.recorder is not None:
            await asyncio.to_thread(self.recorder.close)

    def _video_played(self, out: VideoOut) -> None:
        self._trace.released(time.monotonic(), out)
        self.played.video_played(out)
