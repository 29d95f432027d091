"""One avatar session: one peer, one engine session, two pipelines, one control socket.

``Session`` assembles the audio-in pipeline (``inbound.py``: microphone / WHIP / agent speech ->
feed clock -> the engine's input) and the video-out pipeline (``outbound.py``: the engine's frames
-> playout -> rest face and muted voice -> broadcast to the peer and viewers), connects the peer to
them, and owns their start and teardown and the session's events; each pipeline owns its end of the
engine, the session touches neither end itself. What it holds beyond the pipelines sits in small
parts: the peer (``peer_slot.py``), the steps others wait on (``lifecycle.py``), the instants the
reaper judges (``liveness.py``), its tasks (``server.base.tasks``), all started here. The API and
the reaper use the session's own methods, never its pipelines' parts, and only this module changes
its state.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from pathlib import Path

import numpy as np
from aiortc import RTCPeerConnection, RTCSessionDescription

from server.base.engine_port import EngineError, QualityChange, SessionEngine
from server.base.errors import ApiError
from server.base.local_engine import LocalEngine
from server.base.metrics import ServerMetrics
from server.base.protocol import ErrorEvent, Mode, QualityChanged, SessionCreate, SessionReady
from server.base.tasks import TaskSet
from server.config import Settings
from server.media.microphone import consume_microphone
from server.media.peer import answer, answer_ingest, close_peer, create_peer
from server.media.viewers import TooManyViewers
from server.session.events import SessionEvents
from server.session.inbound import Inbound
from server.session.lifecycle import Lifecycle
from server.session.liveness import Liveness
from server.session.metrics_loop import MetricsLoop
from server.session.outbound import Outbound
from server.session.peer_slot import PeerSlot
from server.session.trace import LatencyTrace
from server.voice.tts import TTSBackend

log = logging.getLogger(__name__)


class Session:
    def __init__(
        self,
        session_id: str,
        options: SessionCreate,
        settings: Settings,
        link: SessionEngine,
        local: LocalEngine,
        metrics: ServerMetrics,
        record_dir: Path | None,
        tts: TTSBackend | None = None,
    ) -> None:
        self.id = session_id
        self.token = secrets.token_urlsafe(24)
        self.settings = settings
        self.avatar = options.avatar
        self.drawn = link.drawn  # a bundled avatar drawn by its renderer at the generated motion
        self.metrics = metrics
        self.liveness = Liveness()
        self.lifecycle = Lifecycle()
        self.control_lock = asyncio.Lock()  # held by the one control socket
        self.events = SessionEvents(metrics, self.ready_event, self.lifecycle.started)

        self.trace = LatencyTrace()
        self.inbound = Inbound(session_id, options, settings, link, lambda: self.outbound.generated.samples,
                               metrics, self.events.emit, self._heard, self.trace.fed_block, tts,
                               local.voice_activity)
        self.outbound = Outbound(session_id, settings, link, self.inbound.voice, self.lifecycle.connected,
                                 self.liveness, self.trace, metrics, self.events.emit, self._viewer_connected,
                                 record_dir, local.mp4_writer)
        self.peer = PeerSlot()
        self.tasks = TaskSet(f"{session_id}:", self._task_failed)

    @property
    def fps(self) -> int:
        return self.outbound.fps

    @property
    def sample_rate(self) -> int:
        return self.outbound.sample_rate

    @property
    def height(self) -> int:
        return self.outbound.frame_size[0]

    @property
    def width(self) -> int:
        return self.outbound.frame_size[1]

    @property
    def control_attached(self) -> bool:
        return self.control_lock.locked()

    @property
    def mode(self) -> Mode:
        return self.inbound.mode

    @property
    def pc(self) -> RTCPeerConnection | None:
        return self.peer.pc

    @property
    def closing(self) -> bool:
        return self.lifecycle.closing

    @property
    def close_reason(self) -> str | None:
        return self.lifecycle.close_reason

    @property
    def closed(self) -> bool:
        """Teardown has finished."""
        return self.lifecycle.closed.is_set()

    async def wait_closed(self) -> None:
        await self.lifecycle.closed.wait()

    @property
    def started(self) -> bool:
        """The feed clock and the broadcast run."""
        return self.lifecycle.started.is_set()

    @property
    def connected(self) -> bool:
        """The peer, or a viewer, has connected."""
        return self.lifecycle.connected.is_set()

    @property
    def viewers(self) -> int:
        """WHEP viewers, connected or not."""
        return len(self.outbound.viewers)

    @property
    def viewers_connected(self) -> bool:
        return self.outbound.viewers.connected

    def playout_delay(self) -> float:
        """Seconds between a frame's arrival and its deadline in playout, now."""
        return self.outbound.playout.stats().delay

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """The session's first tasks: the agent's speech intake, and the engine, prefilled with silence
        so that it computes the first chunk now, before the browser's offer, its frames taken by the
        video-out pipeline for the session's life. The media's tasks start once a peer or viewer is
        connected (:meth:`_start_media`)."""
        self.tasks.spawn(self.inbound.voice.run(), "intake")
        self.inbound.prefill()
        self.liveness.engine_started()
        self.lifecycle.engine_started.set()
        self.tasks.spawn(self._take_frames(), "engine-frames")
        self.tasks.spawn(self.outbound.quality_changes(self._on_quality), "engine-quality")

    async def _take_frames(self) -> None:
        try:
            await self.outbound.pump()
        except EngineError as exc:
            if self.closing:
                return
            log.error("session %s: %s (%s)", self.id, exc.message, exc.code)
            self.events.emit(ErrorEvent(code=exc.code, message=exc.message))
            self._close_soon(exc.code)

    def _close_soon(self, reason: str) -> None:
        """Close from a callback or a task of the session's own."""
        self.tasks.spawn(self.close(reason), "close")

    def _task_failed(self, task: asyncio.Task, exc: BaseException) -> None:
        """One of the session's tasks died: logged with the session, and the client is told."""
        log.error("session %s: task %s died", self.id, task.get_name(), exc_info=exc)
        self.events.emit(ErrorEvent(code="internal_error",
                                    message=f"{task.get_name()} stopped ({exc.__class__.__name__})"))

    def _on_quality(self, change: QualityChange) -> None:
        self.metrics.quality_changes.labels(change.reason).inc()
        self.events.emit(QualityChanged(level=change.level, name=change.name, reason=change.reason))

    async def accept_offer(self, offer: RTCSessionDescription, ingest: bool = False) -> RTCSessionDescription:
        """Answer the browser's offer, or with ``ingest`` a WHIP publisher's (its audio is the microphone,
        nothing is sent back); media starts once ICE/DTLS connect."""
        if self.peer.pc is not None:
            raise ApiError(409, "already_offered", "this session already has a peer connection")
        self.liveness.offered()
        self.peer.pc = pc = create_peer(self.settings.network.ice_servers)
        pc.on("track", self._on_track)
        pc.on("connectionstatechange", lambda: self._on_connection_state(pc))
        if ingest:
            description = await answer_ingest(pc, offer, self.settings.feed.mic_jitter_packets)
        else:
            self.peer.tracks = self.outbound.broadcast.subscribe()
            description = await answer(pc, offer, *self.peer.tracks, mic_packets=self.settings.feed.mic_jitter_packets)
        self._start_media_once()
        return description

    async def accept_ingest(self, offer: RTCSessionDescription) -> tuple[str, RTCSessionDescription]:
        """A WHIP publisher's offer answered (its audio is the microphone): the resource's id and our answer."""
        description = await self.accept_offer(offer, ingest=True)
        self.peer.ingest_id = resource_id = secrets.token_urlsafe(12)
        return resource_id, description

    def ingest_pc(self, resource_id: str) -> RTCPeerConnection | None:
        """The WHIP publisher's connection, if ``resource_id`` names it."""
        return self.peer.pc if self.peer.ingest_id == resource_id else None

    def viewer_pc(self, resource_id: str) -> RTCPeerConnection | None:
        """The WHEP viewer ``resource_id``'s connection, if it is one of this session's."""
        viewer = self.outbound.viewers.get(resource_id)
        return viewer.pc if viewer is not None else None

    async def remove_viewer(self, resource_id: str) -> None:
        await self.outbound.viewers.remove(resource_id)

    async def add_viewer(self, offer: RTCSessionDescription) -> tuple[str, RTCSessionDescription]:
        """A WHEP viewer (read-only: the avatar's video and voice); its id and our answer. Viewers alone
        (an agent's session) start the media clock too. The first offer since a viewer last connected
        starts the connect timeout (later offers do not restart it)."""
        self.liveness.viewer_offered()
        try:
            viewer = await self.outbound.viewers.add(offer)
        except TooManyViewers as exc:
            raise ApiError(503, "too_many_viewers", str(exc)) from None
        self._start_media_once()
        return viewer

    def _start_media_once(self) -> None:
        if not self.lifecycle.media_starting:
            self.lifecycle.media_starting = True
            self.tasks.spawn(self._start_media(), "media-start")

    def _viewer_connected(self) -> None:
        self.liveness.viewer_connected()
        if not self.lifecycle.connected.is_set():
            self.liveness.connected()
            self.lifecycle.connected.set()

    async def _start_media(self) -> None:
        """Start the feed clock once the peer is connected and the engine is up.

        The clock starting at connection (not at session creation) keeps set-up time out of the
        mic-to-avatar latency; frames reach playout only after it, so its t0 is the connection.
        """
        await asyncio.gather(self.lifecycle.connected.wait(), self.lifecycle.engine_started.wait())
        self.inbound.feeder.start(time.monotonic())
        self.tasks.spawn(self.outbound.broadcast.run(), "broadcast")
        self.tasks.spawn(self.inbound.feed_loop.run(), "feed")
        self.tasks.spawn(self._metrics_loop().run(), "metrics")
        self.lifecycle.started.set()
        self.events.announce_ready()

    def _metrics_loop(self) -> MetricsLoop:
        """The once-a-second figures of both pipelines."""
        inbound, outbound = self.inbound, self.outbound
        return MetricsLoop(outbound.playout, outbound.sync, inbound.feeder, outbound.generated,
                           outbound.engine_bytes, inbound.microphone, outbound.played, self.metrics, self.events.emit,
                           self.settings.timing.metrics_interval_s)

    async def close(self, reason: str = "closed") -> None:
        """Free everything this session holds; idempotent, safe from any task."""
        lifecycle = self.lifecycle
        if lifecycle.closing:
            await lifecycle.closed.wait()
            return
        lifecycle.closing = True
        lifecycle.close_reason = reason
        t0 = time.monotonic()
        self.tasks.cancel()
        await self.outbound.close_engine()
        t_worker = time.monotonic()
        await self.outbound.close_recording()
        t_rec = time.monotonic()
        if self.peer.pc is not None:
            await close_peer(self.peer.pc)
        await self.outbound.viewers.close()
        t_pc = time.monotonic()
        await self.tasks.wait()
        lifecycle.closed.set()
        log.info(
            "session %s closed (%s) in %.2f s: worker %.2f, recorder %.2f, peer %.2f",
            self.id,
            reason,
            time.monotonic() - t0,
            t_worker - t0,
            t_rec - t_worker,
            t_pc - t_rec,
        )

    # ---- peer callbacks ------------------------------------------------------------------

    def _on_track(self, track) -> None:
        if track.kind == "audio":
            self.tasks.spawn(self.inbound.microphone.consume(track), "mic")
        else:  # read and ignored, so aiortc's receive queue stays empty
            self.tasks.spawn(consume_microphone(track, self.sample_rate, lambda _: None), "inbound-video")

    async def _on_connection_state(self, pc: RTCPeerConnection) -> None:
        if pc is not self.peer.pc:
            return
        state = pc.connectionState
        if state == "connected":
            self.liveness.connected()
            self.lifecycle.connected.set()
        elif state in ("failed", "closed") and not self.closing:
            if self.mode == "agent" and self.control_attached:
                # The agent still drives the session: a page that watched it left, another may come.
                self.tasks.spawn(self._release_peer(pc, f"peer_{state}"), "release-peer")
            else:
                self._close_soon(f"peer_{state}")

    async def _release_peer(self, pc: RTCPeerConnection, reason: str) -> None:
        """Forget the session's peer (its tracks leave the broadcast); the session waits for the next."""
        self.peer.vacate()
        log.info("session %s: peer left (%s); its agent keeps the session", self.id, reason)
        await close_peer(pc)

    def _heard(self, samples: np.ndarray) -> None:
        self.trace.heard(time.monotonic(), samples)
        self.liveness.heard()

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
        self.inbound.configure(mode, voice, barge_in, user_audio)

    def speak(self, text: str, utterance_id: str | None, voice: str | None) -> str:
        """Queue ``text`` for the agent's voice (agent mode); its utterance id."""
        return self.inbound.voice.speak(text, utterance_id, voice)

    def append_audio(self, pcm: bytes, sample_rate: int, utterance_id: str | None) -> str:
        """The agent's own PCM16 speech, appended to its utterance; the utterance's id."""
        return self.inbound.voice.append_audio(pcm, sample_rate, utterance_id)

    def commit_audio(self, utterance_id: str | None) -> str:
        return self.inbound.voice.commit_audio(utterance_id)

    def interrupt(self) -> int:
        """Stop the agent's voice now: what is queued is dropped, what was fed and not yet heard silenced."""
        return self.inbound.voice.interrupt()
