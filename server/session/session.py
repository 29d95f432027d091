"""One avatar session: one peer, one engine session, one playout, one control socket.

``AvatarSession`` wires the pieces (feed clock -> engine worker thread -> playout ->
tracks; agent speech intake -> speech queue -> playback events) and owns their teardown.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import logging
import secrets
import time
from collections import deque
from pathlib import Path

import numpy as np
from aiortc import RTCPeerConnection, RTCSessionDescription

from engine.frames import PublishedFrame
from engine.pipeline import Pipeline
from server.api.errors import ApiError, ControlError
from server.api.metrics import ServerMetrics
from server.api.protocol import (
    ErrorEvent,
    MetricsEvent,
    ServerEvent,
    SessionCreate,
    SessionReady,
    UserSpeechStarted,
    UserSpeechStopped,
)
from server.config import Mode, Settings
from server.media.audio import float_to_pcm16
from server.media.clock import MonotonicClock
from server.media.microphone import consume_microphone
from server.media.peer import answer, create_peer
from server.media.playout import AudioOut, PlayoutBuffer, PlayoutClosed, VideoOut
from server.media.recorder import MP4Recorder
from server.media.sync_probe import SyncProbe
from server.media.tracks import PlayoutAudioTrack, PlayoutVideoTrack
from server.session.feeder import Feeder, SampleFifo
from server.session.worker import EngineWorker
from server.voice.intake import SpeechIntake
from server.voice.mute import MutedAudio, VoiceGate
from server.voice.playback import PlaybackTracker
from server.voice.speech import SpeechQueue
from server.voice.tts import TTSBackend
from server.voice.vad import SpeechDetector, SpeechStarted, VadConfig, VadUnavailable

log = logging.getLogger(__name__)
EVENT_QUEUE = 256
MAX_OBSERVERS = 4
PREFILL_LIMIT_S = 3.0


class AvatarSession:
    def __init__(
        self,
        session_id: str,
        options: SessionCreate,
        settings: Settings,
        pipeline: Pipeline,
        metrics: ServerMetrics,
        record_dir: Path | None,
        tts: TTSBackend | None = None,
        image: np.ndarray | None = None,
    ) -> None:
        self.id = session_id
        self.token = secrets.token_urlsafe(24)
        self.settings = settings
        self.pipeline = pipeline
        self.metrics = metrics
        self.avatar = options.avatar
        self.image = image  # a custom reference image, when no bundled avatar is used
        self.seed = options.seed
        self.barge_in = settings.barge_in if options.barge_in is None else options.barge_in
        self.user_audio = settings.user_audio if options.user_audio is None else options.user_audio
        self.vad: SpeechDetector | None = None
        self._vad_origin = 0  # microphone sample where the detector's stream began
        self._vad_failed = False
        self.mode: Mode = options.mode or settings.default_mode
        self.fps, self.sample_rate = pipeline.fps, pipeline.sample_rate
        self.height, self.width = pipeline.frame_size
        self.created_at = time.monotonic()
        self.offered_at: float | None = None
        self.first_frame_at: float | None = None
        self.last_heard_at: float | None = None  # connection, or the latest inbound media
        self.connected_at: float | None = None
        self.engine_started_at: float | None = None
        self.close_reason: str | None = None

        sr = self.sample_rate
        self.speech = SpeechQueue(int(settings.max_audio_backlog_s * sr))
        self.mic = SampleFifo(int(settings.mic_buffer_s * sr))
        self.feeder = Feeder(
            sr,
            self.speech,
            self.mic,
            settings.feed_holdback_s,
            int(settings.max_engine_backlog_s * sr),
            self.mode,
            int(settings.agent_engine_backlog_s * sr),
        )
        self.tracker = PlaybackTracker(sr, self.fps)
        self.voice_gate = VoiceGate(sr)
        self.playout = PlayoutBuffer(settings.playout(self.fps, sr), MonotonicClock())
        self.sync = SyncProbe(self.fps, 1000 // self.playout.config.audio_packet_ms)
        self.recorder = MP4Recorder(record_dir / f"{session_id}.mp4", self.fps, sr) if record_dir else None

        self.pc: RTCPeerConnection | None = None
        self.engine = None
        self.worker: EngineWorker | None = None
        self.engine_started = asyncio.Event()
        self.started = asyncio.Event()
        self.connected = asyncio.Event()
        self.closed = asyncio.Event()
        self.control_attached = False
        self.ready_pending = False
        self._events: asyncio.Queue[ServerEvent] = asyncio.Queue(EVENT_QUEUE)
        self._observers: set[asyncio.Queue[ServerEvent]] = set()
        self._tasks: set[asyncio.Task] = set()
        self.intake = SpeechIntake(
            self.speech,
            sr,
            settings.max_text_chars,
            options.voice or settings.voice,
            self.emit,
            metrics,
            tts,
            self.tracker.rename,
        )
        self._spawn(self.intake.run(), "intake")
        self._closing = False
        self._loop = asyncio.get_running_loop()
        self.frames_generated = 0
        self.interrupts: deque[tuple[float, int, int]] = deque(maxlen=16)  # (wall time, cut sample, fed)
        self.generated_samples = 0
        self.frames_shown = 0
        self.mic_samples = 0
        self.mic_peak = 0.0  # loudest inbound sample so far: proof the microphone carries signal
        self._reported_misses = 0
        self._overload_reported = False

    # ---- lifecycle ---------------------------------------------------------------------

    def start_engine(self) -> None:
        """Open the engine session and compute its first chunk now, before the browser's offer."""
        self._spawn(self._start_engine(), "engine-start")

    async def _start_engine(self) -> None:
        try:
            self.engine = await asyncio.to_thread(
                self.pipeline.open_session, avatar=self.avatar, image=self.image, seed=self.seed
            )
        except Exception as exc:
            log.exception("session %s: engine failed to start", self.id)
            self.emit(ErrorEvent(code="engine_failed", message=f"the engine could not start: {exc}"))
            self._spawn(self.close("engine_failed"), "close")
            return
        self._prefill()
        self.worker = EngineWorker(self.engine, self._deliver_from_worker, name=f"engine-{self.id}")
        self.worker.start()
        self.engine_started_at = time.monotonic()
        self.engine_started.set()

    async def accept_offer(self, offer: RTCSessionDescription) -> RTCSessionDescription:
        """Answer the browser's offer; media starts once ICE/DTLS connect."""
        if self.pc is not None:
            raise ApiError(409, "already_offered", "this session already has a peer connection")
        self.offered_at = time.monotonic()
        self.pc = pc = create_peer(self.settings.ice_servers)
        pc.on("track", self._on_track)
        pc.on("connectionstatechange", self._on_connection_state)
        video = PlayoutVideoTrack(self.playout, self.fps, self._on_video_played)
        audio = PlayoutAudioTrack(MutedAudio(self.playout, self.voice_gate), self.sample_rate, self._on_audio_played)
        description = await answer(pc, offer, video, audio)
        self._spawn(self._start_media(), "media-start")
        return description

    async def _start_media(self) -> None:
        """Start the feed clock once the peer is connected and the engine is up.

        The clock starting at connection (not at session creation) keeps set-up time out of the
        mic-to-avatar latency; frames reach playout only after it, so its t0 is the connection.
        """
        await asyncio.gather(self.connected.wait(), self.engine_started.wait())
        self.feeder.start(time.monotonic())
        self._spawn(self._feed_loop(), "feed")
        self._spawn(self._metrics_loop(), "metrics")
        self.started.set()
        self.announce_ready()

    def _prefill(self) -> None:
        """Silence ahead of real time until the first chunk can run: the first frame needs no waiting."""
        step = self.sample_rate // self.fps
        while not self.engine.ready() and self.feeder.fed < PREFILL_LIMIT_S * self.sample_rate:
            self.engine.feed(self.feeder.prefill(step).samples)

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
        if self.worker is not None:
            await asyncio.to_thread(self.worker.stop)
        t_worker = time.monotonic()
        if self.recorder is not None:
            await asyncio.to_thread(self.recorder.close)
        t_rec = time.monotonic()
        if self.pc is not None:
            await self.pc.close()
        t_pc = time.monotonic()
        others = [t for t in self._tasks if t is not current]
        if others:
            await asyncio.gather(*others, return_exceptions=True)
        self.engine = None
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
            self._spawn(consume_microphone(track, self.sample_rate, self._on_mic), "mic")
        else:
            self._spawn(consume_microphone(track, self.sample_rate, lambda _: None), "inbound-video")

    async def _on_connection_state(self) -> None:
        state = self.pc.connectionState if self.pc is not None else "closed"
        if state == "connected":
            self.last_heard_at = self.connected_at = time.monotonic()
            self.connected.set()
        elif state in ("failed", "closed") and not self._closing:
            self._spawn(self.close(f"peer_{state}"), "close")

    def _on_mic(self, samples: np.ndarray) -> None:
        self.last_heard_at = time.monotonic()
        self.mic_samples += samples.size
        if samples.size:
            self.mic_peak = max(self.mic_peak, float(np.abs(samples).max()))
        self.metrics.mic_seconds.inc(samples.size / self.sample_rate)
        if self.feeder.mode == "mirror":
            self.mic.push(samples)
        elif samples.size:
            self._detect_speech(samples)

    def _detect_speech(self, samples: np.ndarray) -> None:
        """Agent mode: user voice activity becomes events and, with barge-in on, interrupts the avatar."""
        if self.vad is None:
            if not self.settings.vad or self._vad_failed:
                return
            try:
                self.vad = SpeechDetector(
                    self.sample_rate,
                    VadConfig(
                        threshold=self.settings.vad_threshold,
                        neg_threshold=max(0.01, self.settings.vad_threshold - 0.15),
                        min_silence_ms=self.settings.vad_min_silence_ms,
                    ),
                )
            except VadUnavailable as exc:
                self._vad_failed = True
                self.emit(ErrorEvent(code="vad_unavailable", message=str(exc)))
                return
            self._vad_origin = self.mic_samples - samples.size
        sr = self.sample_rate
        for event in self.vad.push(samples):
            pts = round(self.voice_gate.released_until / sr, 3)
            mic_time = round((self._vad_origin + event.start) / sr, 3)
            if isinstance(event, SpeechStarted):
                speaking = bool(self.tracker.active or len(self.speech))
                interrupting = self.barge_in and speaking
                self.emit(UserSpeechStarted(mic_time=mic_time, pts=pts, interrupting=interrupting))
                if interrupting:
                    self.interrupt()
            else:
                audio = None
                if self.user_audio:
                    audio = base64.b64encode(float_to_pcm16(event.pcm).tobytes()).decode()
                self.emit(
                    UserSpeechStopped(
                        mic_time=round((self._vad_origin + event.end) / sr, 3),
                        duration_s=round((event.end - event.start) / sr, 3),
                        pts=pts,
                        sample_rate=sr,
                        audio=audio,
                    )
                )

    # ---- engine side ---------------------------------------------------------------------

    async def _feed_loop(self) -> None:
        tick = self.settings.feed_tick_s
        while True:
            block = self.feeder.tick(time.monotonic(), self.generated_samples)
            if block.skipped and not self._overload_reported:
                self._overload_reported = True
                log.warning(
                    "session %s: engine %.1f s behind, skipping input",
                    self.id,
                    (self.feeder.fed - self.generated_samples) / self.sample_rate,
                )
                self.emit(
                    ErrorEvent(
                        code="engine_overloaded",
                        message="the engine is slower than real time on this machine; audio is being skipped",
                    )
                )
            if block.samples.size:
                for seg in block.segments:
                    if seg.first:
                        self.tracker.begin(seg.utterance_id, block.start + seg.start)
                    if seg.end > seg.start:
                        self.tracker.fed(seg.utterance_id, block.start + seg.end)
                    if seg.last:
                        self.tracker.end(seg.utterance_id)
                self.engine.feed(block.samples)
                self.worker.wake()
            if self.worker.error is not None:
                self.emit(ErrorEvent(code="engine_failed", message=f"the engine stopped: {self.worker.error}"))
                self._spawn(self.close("engine_failed"), "close")
                return
            await asyncio.sleep(tick)

    def _deliver_from_worker(self, frames: list[PublishedFrame], step_s: float) -> None:
        """Worker thread: record, then hand frames to playout on the loop, waiting while it is full."""
        self.metrics.chunk_seconds.observe(step_s)
        last = frames[-1]
        self.generated_samples = (last.index + 1) * last.sample_rate // last.fps
        if self.recorder is not None:
            for frame in frames:
                self.recorder.submit(frame)
        future = asyncio.run_coroutine_threadsafe(self._put_frames(frames), self._loop)
        while not self._closing:
            try:
                future.result(timeout=0.5)
                return
            except concurrent.futures.TimeoutError:
                continue
            except (PlayoutClosed, concurrent.futures.CancelledError):
                return
        future.cancel()

    async def _put_frames(self, frames: list[PublishedFrame]) -> None:
        await self.connected.wait()
        for frame in frames:
            await self.playout.put(frame)
            self.frames_generated += 1
            self.metrics.frames_generated.inc()

    # ---- playout callbacks (event loop, from the outgoing tracks) -------------------------

    def _on_audio_played(self, out: AudioOut) -> None:
        if not out.inserted:
            self.sync.released("audio", out.media_sample / self.sample_rate)

    def _on_video_played(self, out: VideoOut) -> None:
        if not out.inserted:
            self.sync.released("video", float(out.pts))
        self.metrics.frames_played.inc()
        if not out.repeated:
            self.frames_shown += 1
        if self.first_frame_at is None and self.offered_at is not None:
            self.first_frame_at = now = time.monotonic()
            self.metrics.first_frame_seconds.observe(now - self.offered_at)
            log.info(
                "session %s: first frame %.2f s after the offer (connected after %.2f s; engine up %.2f s "
                "after creation, the offer came %.2f s after creation)",
                self.id,
                now - self.offered_at,
                (self.connected_at or now) - self.offered_at,
                (self.engine_started_at or now) - self.created_at,
                self.offered_at - self.created_at,
            )
        for event in self.tracker.on_played(out.media_slot):
            self.emit(event)

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

    def announce_ready(self) -> None:
        """Queue ``session.ready`` unless one is already waiting to be sent (reconnects get a fresh one)."""
        if not self.ready_pending:
            self.ready_pending = True
            self.emit(self.ready_event())

    def emit(self, event: ServerEvent) -> None:
        """Queue an event for the control socket and each observer; the oldest is dropped when nobody reads."""
        if isinstance(event, ErrorEvent):
            self.metrics.errors.labels(event.code).inc()
        for queue in (self._events, *self._observers):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(event)

    def observe(self) -> asyncio.Queue[ServerEvent] | None:
        """A read-only event feed (a viewer page next to an agent that holds the control socket); None if full."""
        if len(self._observers) >= MAX_OBSERVERS:
            return None
        queue: asyncio.Queue[ServerEvent] = asyncio.Queue(EVENT_QUEUE)
        if self.started.is_set():
            queue.put_nowait(self.ready_event())
        self._observers.add(queue)
        return queue

    def unobserve(self, queue: asyncio.Queue[ServerEvent]) -> None:
        self._observers.discard(queue)

    async def next_event(self) -> ServerEvent:
        event = await self._events.get()
        if isinstance(event, SessionReady):
            self.ready_pending = False
        return event

    def _require_agent(self) -> None:
        if self.feeder.mode != "agent":
            raise ControlError("wrong_mode", 'speech needs agent mode: send {"type": "config", "mode": "agent"}')

    def speak(self, text: str, utterance_id: str | None, voice: str | None) -> str:
        self._require_agent()
        return self.intake.speak(text, utterance_id, voice)

    def append_audio(self, pcm: bytes, sample_rate: int, utterance_id: str | None = None) -> str:
        self._require_agent()
        return self.intake.append(pcm, sample_rate, utterance_id)

    def commit_audio(self, utterance_id: str | None) -> str:
        self._require_agent()
        return self.intake.commit(utterance_id)

    def interrupt(self) -> int:
        """Stop the avatar's voice now: drop what is queued, silence what was fed but not yet heard.

        The cut is the media sample of the next audio packet to be released, so the voice stops
        within one packet (20 ms) of media time. Everything fed to the engine up to now (``fed``)
        belongs to speech being interrupted; the feed clock feeds silence from here on, so the
        face returns to listening once the frames already generated have played. Returns the cut.
        """
        self.intake.interrupt()
        cut = self.voice_gate.released_until
        if self.feeder.mode == "agent":  # in mirror mode the voice is the user's own: never muted
            self.voice_gate.mute(cut, self.feeder.fed)
        for event in self.tracker.interrupt(cut):
            self.emit(event)
        self.interrupts.append((time.monotonic(), cut, self.feeder.fed))
        return cut

    def configure(
        self, mode: Mode | None, voice: str | None, barge_in: bool | None = None, user_audio: bool | None = None
    ) -> None:
        if voice is not None:
            self.intake.voice = voice
        if barge_in is not None:
            self.barge_in = barge_in
        if user_audio is not None:
            self.user_audio = user_audio
        if mode is not None and mode != self.feeder.mode:
            if mode == "mirror":
                self.interrupt()
            self.mic.clear()
            self.vad = None
            self.feeder.mode = self.mode = mode

    # ---- metrics ------------------------------------------------------------------------

    def snapshot(self, fps: float) -> MetricsEvent:
        stats = self.playout.stats()
        return MetricsEvent(
            fps=round(fps, 2),
            playout_delay_ms=round(stats.delay * 1000, 1),
            buffer_depth=stats.depth,
            deadline_misses=stats.deadline_misses,
            frames_played=stats.frames_shown,
            frames_generated=self.frames_generated,
            engine_backlog_ms=round(max(0, self.feeder.fed - self.generated_samples) * 1000 / self.sample_rate, 1),
            av_offset_ms=round(1000 * (stats.av_offset if self.sync.offset_s is None else self.sync.offset_s), 1),
            mic_seconds=round(self.mic_samples / self.sample_rate, 2),
            engine_state_bytes=0 if self.engine is None else self.engine.nbytes(),
        )

    async def _metrics_loop(self) -> None:
        interval = self.settings.metrics_interval_s
        last_shown, last_t = self.frames_shown, time.monotonic()
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            event = self.snapshot((self.frames_shown - last_shown) / (now - last_t))
            last_shown, last_t = self.frames_shown, now
            self.metrics.deadline_misses.inc(event.deadline_misses - self._reported_misses)
            self._reported_misses = event.deadline_misses
            self.emit(event)
