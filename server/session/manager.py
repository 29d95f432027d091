"""All live sessions of one app: the session cap, lookup with token checks, and the reaper
that frees sessions whose peer never came, never connected, or went silent."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import secrets
import time

import numpy as np

from engine.avatars import DEFAULT_AVATAR
from engine.media.audio_io import MediaError, decode_image
from engine.pipeline import Pipeline
from server.api.errors import ApiError
from server.api.metrics import ServerMetrics
from server.api.protocol import SessionCreate
from server.config import Settings
from server.media.peer import last_rtcp_age
from server.session.session import AvatarSession
from server.voice.tts import TTSBackend

log = logging.getLogger(__name__)


class SessionManager:
    """All live sessions of one app: the cap, lookup with token checks, and the reaper."""

    def __init__(
        self,
        settings: Settings,
        pipelines: dict[str, Pipeline],
        avatars: list[str],
        metrics: ServerMetrics,
        default_preset: str,
        tts: TTSBackend | None = None,
    ) -> None:
        self.settings = settings
        self.tts = tts
        self.pipelines = pipelines
        self.avatars = avatars
        self.metrics = metrics
        self.default_preset = default_preset
        self.sessions: dict[str, AvatarSession] = {}
        self._reaper: asyncio.Task | None = None
        self._closing: set[asyncio.Task] = set()
        metrics.sessions_active.set_function(lambda: len(self.sessions))
        metrics.playout_delay_seconds.set_function(self._mean_delay)

    def _mean_delay(self) -> float:
        delays = [s.playout.stats().delay for s in self.sessions.values() if s.started.is_set()]
        return sum(delays) / len(delays) if delays else 0.0

    def create(self, options: SessionCreate) -> AvatarSession:
        if len(self.sessions) >= self.settings.max_sessions:
            self.metrics.sessions_rejected.labels("capacity").inc()
            raise ApiError(
                503,
                "at_capacity",
                f"the server is at its limit of {self.settings.max_sessions} sessions; try again later",
            )
        preset = options.quality or self.default_preset
        if preset not in self.pipelines:
            raise ApiError(
                400,
                "bad_quality",
                f"unknown quality preset {preset!r}; choose one of: {', '.join(sorted(self.pipelines))}",
            )
        image = self._reference_image(options, self.pipelines[preset])
        if options.avatar is None and image is None:
            options = options.model_copy(update={"avatar": self.settings.default_avatar or DEFAULT_AVATAR})
        if image is None and options.avatar not in self.avatars:
            raise ApiError(
                400,
                "bad_avatar",
                f"unknown avatar {options.avatar!r}; choose one of: {', '.join(self.avatars)}",
            )
        sid = "s_" + secrets.token_hex(8)
        record_dir = self.settings.record_dir if options.record else None
        session = AvatarSession(
            sid, options, self.settings, self.pipelines[preset], self.metrics, record_dir, self.tts, image
        )
        self.sessions[sid] = session
        session.start_engine()
        self.metrics.sessions_created.inc()
        return session

    def _reference_image(self, options: SessionCreate, pipeline: Pipeline) -> np.ndarray | None:
        """The decoded ``image`` option, or None; every way it can be wrong is a 4xx."""
        if options.image is None:
            return None
        if options.avatar is not None:
            raise ApiError(400, "bad_image", "give either avatar or image, not both")
        if not pipeline.accepts_images:
            raise ApiError(400, "bad_image", f"the {pipeline.config.name} engine draws bundled avatars only")
        try:
            data = base64.b64decode(options.image, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "bad_image", "image is not valid base64") from None
        if len(data) > self.settings.max_image_bytes:
            raise ApiError(413, "image_too_large", f"image over {self.settings.max_image_bytes} bytes")
        try:
            image = decode_image(data)
        except MediaError as exc:
            raise ApiError(400, "bad_image", str(exc)) from None
        if min(image.shape[:2]) < 64:
            raise ApiError(400, "bad_image", f"image is {image.shape[1]}x{image.shape[0]}; need at least 64x64")
        return image

    def get(self, session_id: str, token: str | None) -> AvatarSession:
        session = self.sessions.get(session_id)
        if session is None or session.closing:
            raise ApiError(404, "unknown_session", f"no session {session_id!r}")
        if token is None or not secrets.compare_digest(token, session.token):
            raise ApiError(401, "bad_token", "missing or wrong session token")
        return session

    async def close(self, session_id: str, reason: str) -> None:
        session = self.sessions.get(session_id)
        if session is None:
            return
        try:
            await session.close(reason)
        finally:
            if self.sessions.pop(session_id, None) is not None:
                self.metrics.sessions_closed.labels(session.close_reason or reason).inc()

    def close_soon(self, session_id: str, reason: str) -> None:
        task = asyncio.create_task(self.close(session_id, reason))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close_all(self) -> None:
        await asyncio.gather(*(self.close(sid, "shutdown") for sid in list(self.sessions)))
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    # ---- reaper ---------------------------------------------------------------------------

    def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap_loop(), name="session-reaper")

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await self.close_all()

    async def _reap_loop(self, interval_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval_s)
            for sid, session in list(self.sessions.items()):
                try:
                    reason = await self.reason_to_reap(session, time.monotonic())
                except Exception:
                    log.exception("session %s: liveness check failed", sid)
                    reason = "check_failed"
                if reason is not None:
                    log.info("reaping session %s: %s", sid, reason)
                    self.close_soon(sid, reason)

    async def reason_to_reap(self, session: AvatarSession, now: float) -> str | None:
        s = self.settings
        if session.closing:  # closed itself (peer gone, engine failed): forget it once done
            return session.close_reason if session.closed.is_set() else None
        pc = session.pc
        if pc is None:
            return "no_offer" if now - session.created_at > s.offer_timeout_s else None
        if pc.connectionState in ("failed", "closed"):
            return f"peer_{pc.connectionState}"
        if pc.connectionState != "connected":
            return "connect_timeout" if now - (session.offered_at or now) > s.connect_timeout_s else None
        heard = session.last_heard_at or now
        age = await last_rtcp_age(pc)
        if age is not None:
            heard = max(heard, now - age)
        return "peer_timeout" if now - heard > s.peer_timeout_s else None
