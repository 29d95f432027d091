"""One avatar session: one peer, one engine session, one playout, one control socket.

``Session`` wires the parts (feed loop -> engine link -> generated frames -> playout ->
tracks -> playback reporter; agent voice -> speech queue -> feed loop; events out) and owns
their start and teardown. Each part does one job and lives in its own module.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from pathlib import Path

import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription

from server.base.engine_link import EngineError, EngineLink, QualityEvent
from server.base.errors import ApiError
from server.base.metrics import ServerMetrics
from server.base.protocol import ErrorEvent, Mode, QualityChanged, SessionCreate, SessionReady
from server.config import Settings
from server.media.broadcast import Broadcast
from server.media.clock import MonotonicClock
from server.media.microphone import MicrophoneIntake, SampleFifo, consume_microphone
from server.media.peer import answer, answer_ingest, close_peer, create_peer
from server.media.playout import PlayoutBuffer, VideoOut
from server.media.recorder import MP4Recorder
from server.media.sync_probe import SyncProbe
from server.media.tracks import PlayoutAudioTrack, PlayoutVideoTrack
from server.media.viewers import TooManyViewers, Viewers
from server.session.events import SessionEvents
from server.session.feed_loop import FeedLoop
from server.session.feeder import Feeder
from server.session.generated import GeneratedFrames
from server.session.liveness import Liveness
from server.session.metrics_loop import MetricsLoop
from server.session.playback_reporter import PlaybackReporter
from server.session.trace import LatencyTrace
from server.voice.agent import AgentVoice
from server.voice.mute import MutedAudio
from server.voice.rest_face import RestingVideo
from server.voice.speech import SpeechQueue
from server.voice.tts import TTSBackend

log = logging.getLogger(__name__)


class Session:
    def __init__(
        self,
        session_id: str,
        options: SessionCreate,
        settings: Settings,
        link: EngineLink,
        metrics: ServerMetrics,
        record_dir: Path | None,
        tts: TTSBackend | None = None,
    ) -> None:
        self.id = session_id
        self.token = secrets.token_urlsafe(24)
        self.settings = settings
        self.avatar = options.avatar
        self.link = link
        self.metrics = metrics
        info = self.link.info
        self.fps, self.sample_rate = info.fps, info.sample_rate
        self.height, self.width = self.link.frame_size
        self.liveness = Liveness()
        self.close_reason: str | None = None
        self.control_lock = asyncio.Lock()  # held by the one control socket
        self.engine_started = asyncio.Event()
        self.started = asyncio.Event()
        self.connected = asyncio.Event()
        self.closed = asyncio.Event()
        self.events = SessionEvents(metrics, self.ready_event, self.started)

        sr = self.sample_rate
        speech = SpeechQueue(int(settings.max_audio_backlog_s * sr), settings.max_queued_utterances)
        self.mic = SampleFifo(int(settings.mic_buffer_s * sr))
        self.feeder = Feeder(
            sr,
            speech,
            self.mic,
            settings.feed_holdback_s,
            int(settings.max_engine_backlog_s * sr),
            options.mode or settings.default_mode,
            int(settings.agent_engine_backlog_s * sr),
        )
        self.voice = AgentVoice(
            speech,
            self.feeder,
            sr,
            self.fps,
            settings.max_text_chars,
            settings.vad_config(),
            options.voice or settings.voice,
            settings.barge_in if options.barge_in is None else options.barge_in,
            settings.user_audio if options.user_audio is None else options.user_audio,
            self.events.emit,
            metrics,
            tts,
        )
        self.voice.on_cut = link.silence_from  # an interrupt silences the engine's audio from the cut on
        self.microphone = MicrophoneIntake(sr, metrics, self._on_mic)
        self.playout = PlayoutBuffer(settings.playout(self.fps, sr), MonotonicClock())
        self.sync = SyncProbe(self.fps, 1000 // self.playout.config.audio_packet_ms)
        recorder = MP4Recorder(record_dir / f"{session_id}.mp4", self.fps, sr) if record_dir else None
        self.recorder = recorder
        self.trace = LatencyTrace()
        self.generated = GeneratedFrames(self.playout, recorder, self.connected, metrics, link.set_origin,
                                         self.trace.arrived)
        self.played = PlaybackReporter(
            session_id, sr, self.sync, self.voice.tracker, self.liveness, metrics, self.events.emit
        )
        self.resting = RestingVideo(self.playout, self.voice.gate, sr // self.fps,
                                    on_replaced=metrics.frames_rested.inc)
        self.broadcast = Broadcast(
            PlayoutVideoTrack(self.resting, self.fps, self._video_played),
            PlayoutAudioTrack(MutedAudio(self.playout, self.voice.gate), sr, self.played.audio_played),
        )
        self.viewers = Viewers(self.broadcast, settings.ice_servers, sr, self._viewer_connected, settings.max_viewers)
        self.ingest_id: str | None = None  # the WHIP resource, when the peer is a WHIP publisher
        self.feed_loop = FeedLoop(
            session_id,
            self.feeder,
            self.link,
            self.generated,
            self.voice.tracker,
            self.events.emit,
            settings.feed_tick_s,
            self.trace.fed_block,
        )
        self.metrics_loop = MetricsLoop(
            self.playout,
            self.sync,
            self.feeder,
            self.generated,
            self.link,
            self.microphone,
            self.played,
            metrics,
            self.events.emit,
            settings.metrics_interval_s,
        )

        self.pc: RTCPeerConnection | None = None
        self._peer_tracks: tuple[MediaStreamTrack, ...] = ()  # the peer's subscriptions to the broadcast
        self._tasks: set[asyncio.Task] = set()
        self._media_starting = False
        self._closing = False
        self._spawn(self.voice.run(), "intake")

    @property
    def control_attached(self) -> bool:
        return self.control_lock.locked()

    @property
    def mode(self) -> Mode:
        return self.feeder.mode

    # ---- lifecycle ---------------------------------------------------------------------

    def start_engine(self) -> None:
        """Prefill silence so the engine computes the first chunk now, before the browser's offer,
        then take its frames for the session's life."""
        self.link.prefill(self.feeder.prefill(self.link.stream.first_chunk_samples).samples)
        self.liveness.engine_started_at = time.monotonic()
        self.engine_started.set()
        self._spawn(self._take_frames(), "engine-frames")
        self._spawn(self.link.quality_changes(self._on_quality), "engine-quality")

    async def _take_frames(self) -> None:
        try:
            await self.link.deliver(self.generated)
        except EngineError as exc:
            if self._closing:
                return
            log.error("session %s: %s (%s)", self.id, exc.message, exc.code)
            self.events.emit(ErrorEvent(code=exc.code, message=exc.message))
            self._spawn(self.close(exc.code), "close")

    def _on_quality(self, change: QualityEvent) -> None:
        self.metrics.quality_changes.labels(change.reason).inc()
        self.events.emit(QualityChanged(level=change.level, name=change.name, reason=change.reason))

    async def accept_offer(self, offer: RTCSessionDescription, ingest: bool = False) -> RTCSessionDescription:
        """Answer the browser's offer, or with ``ingest`` a WHIP publisher's (its audio is the microphone,
        nothing is sent back); media starts once ICE/DTLS connect."""
        if self.pc is not None:
            raise ApiError(409, "already_offered", "this session already has a peer connection")
        self.liveness.offered_at = time.monotonic()
        self.pc = pc = create_peer(self.settings.ice_servers)
        pc.on("track", self._on_track)
        pc.on("connectionstatechange", lambda: self._on_connection_state(pc))
        if ingest:
            description = await answer_ingest(pc, offer, self.settings.mic_jitter_packets)
        else:
            self._peer_tracks = self.broadcast.subscribe()
            description = await answer(pc, offer, *self._peer_tracks, mic_packets=self.settings.mic_jitter_packets)
        self._start_media_once()
        return description

    async def add_viewer(self, offer: RTCSessionDescription) -> tuple[str, RTCSessionDescription]:
        """A WHEP viewer (read-only: the avatar's video and voice); its id and our answer. Viewers alone
        (an agent's session) start the media clock too. The first offer since a viewer last connected
        starts the connect timeout (later offers do not restart it)."""
        if self.liveness.viewers_waiting_since is None:
            self.liveness.viewers_waiting_since = time.monotonic()
        try:
            viewer = await self.viewers.add(offer)
        except TooManyViewers as exc:
            raise ApiError(503, "too_many_viewers", str(exc)) from None
        self._start_media_once()
        return viewer

    def _start_media_once(self) -> None:
        if not self._media_starting:
            self._media_starting = True
            self._spawn(self._start_media(), "media-start")

    def _viewer_connected(self) -> None:
        self.liveness.viewers_waiting_since = None
        if not self.connected.is_set():
            self.liveness.connected()
            self.connected.set()

    async def _start_media(self) -> None:
        """Start the feed clock once the peer is connected and the engine is up.

        The clock starting at connection (not at session creation) keeps set-up time out of the
        mic-to-avatar latency; frames reach playout only after it, so its t0 is the connection.
        """
        await asyncio.gather(self.connected.wait(), self.engine_started.wait())
        self.feeder.start(time.monotonic())
        self._spawn(self.broadcast.run(), "broadcast")
        self._spawn(self.feed_loop.run(), "feed")
        self._spawn(self.metrics_loop.run(), "metrics")
        self.started.set()
        self.events.announce_ready()

    async def close(self, reason: str = "closed") -> None:
        """Free everything this session holds; idempotent, safe from any task."""
        if self._closing:
            await self.closed.wait()
            return
        self._closing = True
        self.close_reason = reason
        t0 = time.monotonic()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        self.playout.close()
        await self.link.close()
        t_worker = time.monotonic()
        if self.recorder is not None:
            await asyncio.to_thread(self.recorder.close)
        t_rec = time.monotonic()
        if self.pc is not None:
            await close_peer(self.pc)
        await self.viewers.close()
        t_pc = time.monotonic()
        others = [t for t in self._tasks if t is not current]
        if others:
            await asyncio.gather(*others, return_exceptions=True)
        self.closed.set()
        log.info(
            "session %s closed (%s) in %.2f s: worker %.2f, recorder %.2f, peer %.2f",
            self.id,
            reason,
            time.monotonic() - t0,
            t_worker - t0,
            t_rec - t_worker,
            t_pc - t_rec,
        )

    @property
    def closing(self) -> bool:
        return self._closing

    def _spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=f"{self.id}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- peer callbacks ------------------------------------------------------------------

    def _on_track(self, track) -> None:
        if track.kind == "audio":
            self._spawn(self.microphone.consume(track), "mic")
        else:  # read and ignored, so aiortc's receive queue stays empty
            self._spawn(consume_microphone(track, self.sample_rate, lambda _: None), "inbound-video")

    async def _on_connection_state(self, pc: RTCPeerConnection) -> None:
        if pc is not self.pc:
            return
        state = pc.connectionState
        if state == "connected":
            self.liveness.connected()
            self.connected.set()
        elif state in ("failed", "closed") and not self._closing:
            if self.mode == "agent" and self.control_attached:
                # The agent still drives the session: a page that watched it left, another may come.
                self._spawn(self._release_peer(pc, f"peer_{state}"), "release-peer")
            else:
                self._spawn(self.close(f"peer_{state}"), "close")

    async def _release_peer(self, pc: RTCPeerConnection, reason: str) -> None:
        """Forget the session's peer (its tracks leave the broadcast); the session waits for the next."""
        self.pc = None
        for track in self._peer_tracks:
            track.stop()
        self._peer_tracks = ()
        log.info("session %s: peer left (%s); its agent keeps the session", self.id, reason)
        await close_peer(pc)

    def _video_played(self, out: VideoOut) -> None:
        self.trace.released(time.monotonic(), out)
        self.played.video_played(out)

    def _on_mic(self, samples: np.ndarray) -> None:
        self.trace.heard(time.monotonic(), samples)
        self.liveness.heard()
        if self.feeder.mode == "mirror":
            self.mic.push(samples)
        else:
            self.voice.hear_user(samples, self.microphone.samples)

    # ---- control API ----------------------------------------------------------------------

    def ready_event(self) -> SessionReady:
        return SessionReady(
            session_id=self.id,
            mode=self.mode,
            avatar=self.avatar,
            fps=self.fps,
            sample_rate=self.sample_rate,
            width=self.width,
            height=self.height,
        )

    def configure(
        self, mode: Mode | None, voice: str | None, barge_in: bool | None = None, user_audio: bool | None = None
    ) -> None:
        self.voice.configure(voice, barge_in, user_audio)
        if mode is not None and mode != self.feeder.mode:
            if mode == "mirror":
                self.voice.interrupt()
            self.mic.clear()
            self.voice.barge_in.reset()
            self.feeder.mode = mode
