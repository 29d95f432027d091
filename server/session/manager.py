"""All live sessions of one app: the session cap, creation with its checks, lookup with token checks."""

from __future__ import annotations

import asyncio
import secrets

from server.base.engine_port import Engine, EngineError
from server.base.errors import ApiError
from server.base.loop_load import LoopLoad
from server.base.metrics import ServerMetrics
from server.base.protocol import SessionCreate
from server.config import Settings
from server.session.personal import PersonalAvatars
from server.session.reaper import SessionReaper
from server.session.reference_image import ReferenceImages
from server.session.session import Session
from server.voice.tts import TTSBackend


class SessionManager:
    """All live sessions of one app; the reaper (started with :meth:`start`) frees the dead ones."""

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        metrics: ServerMetrics,
        default_preset: str,
        tts: TTSBackend | None = None,
    ) -> None:
        self.settings = settings
        self.tts = tts
        self.engine = engine
        self.metrics = metrics
        self.default_preset = default_preset
        self.sessions: dict[str, Session] = {}
        self.reaper = SessionReaper(self, settings.timing)
        self.images = ReferenceImages(engine, settings.limits)
        self.personal = PersonalAvatars(engine.local.avatar_store(settings.session.avatar_store), engine.local.enroll,
                                        self._bundled_names, settings.enrolment)
        self._closing: set[asyncio.Task] = set()
        self._opening = 0  # creations past the cap check and not yet in ``sessions``: they count against it
        self.loop_load = LoopLoad(settings.node.web_loop_budget)
        self._sampling: asyncio.Task | None = None
        metrics.media.loop_busy.set_function(lambda: self.loop_load.busy)
        metrics.sessions_active.set_function(lambda: len(self.sessions))
        metrics.media.playout_delay_seconds.set_function(self._mean_delay)

    def _mean_delay(self) -> float:
        delays = [s.playout_delay() for s in self.sessions.values() if s.started]
        return sum(delays) / len(delays) if delays else 0.0

    async def create(self, options: SessionCreate) -> Session:
        """Check the request, then open the engine session on the worker with the most free
        capacity (measured, not a fixed count); ``max_sessions``, when set, caps the total, and this
        process's event loop must have room for one more session (:class:`LoopLoad`). A creation
        counts against the cap from its check on, with no await in between, so parallel requests
        cannot all pass the check before any of them is recorded."""
        cap = self.settings.engine.max_sessions
        held = len(self.sessions) + self._opening
        if cap is not None and held >= cap:
            self.metrics.sessions_rejected.labels("capacity").inc()
            raise ApiError(503, "at_capacity", f"the server is at its limit of {cap} sessions; try again later")
        if self.loop_load.room(held) <= 0:
            self.metrics.sessions_rejected.labels("web_saturated").inc()
            raise ApiError(503, "at_capacity", f"this web process's event loop is {self.loop_load.busy:.0%} busy "
                           f"with {held} sessions: it takes no more; try again later", retry_after=5)
        self._opening += 1
        try:
            return await self._create(options)
        finally:
            self._opening -= 1

    async def _create(self, options: SessionCreate) -> Session:
        if not self.engine.available:
            self.metrics.sessions_rejected.labels("engine_unavailable").inc()
            raise ApiError(503, "engine_unavailable", "no engine worker is running; see the server log")
        preset = options.quality or self.default_preset
        presets = self.engine.info.presets
        if preset not in presets:
            raise ApiError(
                400,
                "bad_quality",
                f"unknown quality preset {preset!r}; choose one of: {', '.join(presets)}",
            )
        photo = await self.images.decode(options)
        named = None  # a photo the avatar's name stands for: a bundled portrait or a personal avatar
        if photo is None and options.avatar is not None and options.avatar not in self.engine.avatars:
            named = photo = await asyncio.to_thread(self.engine.portrait, options.avatar)
            if photo is None:
                named = photo = await self.personal.load(options.avatar)  # the person's photo and own mouth
            if photo is not None and not self.engine.info.accepts_images:
                raise ApiError(400, "bad_avatar", f"the {self.engine.info.config} engine draws bundled avatars only")
        if options.avatar is None and photo is None:
            avatar = self.settings.session.default_avatar or self.engine.default_avatar
            options = options.model_copy(update={"avatar": avatar})
        if photo is None and options.avatar not in self.engine.avatars:
            raise ApiError(
                400,
                "bad_avatar",
                f"unknown avatar {options.avatar!r}; choose one of: "
                f"{', '.join(self.engine.avatars + [p.name for p in self.engine.portraits] + self.personal.names())}",
            )
        sid = "s_" + secrets.token_hex(8)
        try:
            drawn = self.settings.session.drawn if options.drawn is None else options.drawn
            driver = None if named is not None else options.avatar  # a named photo moves as the default
            link = await self.engine.open(preset, driver, photo, options.seed, name=sid, drawn=drawn)
        except EngineError as exc:
            if exc.code in ("at_capacity", "engine_unavailable"):
                self.metrics.sessions_rejected.labels(exc.code).inc()
                raise ApiError(503, exc.code, exc.message, retry_after=exc.retry_after_s) from None
            raise ApiError(400, "bad_image" if photo is not None else "bad_avatar", exc.message) from None
        record_dir = self.settings.session.record_dir if options.record else None
        session = Session(sid, options, self.settings, link, self.engine.local, self.metrics, record_dir, self.tts)
        self.sessions[sid] = session
        session.start()
        self.metrics.sessions_created.inc()
        return session

    def _bundled_names(self) -> list[str]:
        """The names bundled avatars hold (drawn ones and real portraits): no personal avatar takes one."""
        return self.engine.avatars + [p.name for p in self.engine.portraits]

    def waiting_for_offer(self, session_id: str) -> bool:
        """Whether a session holds its slot with no peer yet (it counts against its client's limit)."""
        session = self.sessions.get(session_id)
        if session is None or session.closing:
            return False
        return session.pc is None and not session.connected

    def get(self, session_id: str, token: str | None) -> Session:
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

    def room(self) -> int:
        """More sessions this web process's event loop takes now."""
        return self.loop_load.room(len(self.sessions) + self._opening)

    def start(self) -> None:
        self.reaper.start()
        self._sampling = asyncio.get_running_loop().create_task(self.loop_load.run(), name="loop-load")

    async def stop(self) -> None:
        if self._sampling is not None:
            self._sampling.cancel()
        await self.personal.close()
        await self.reaper.stop()
        await self.close_all()
