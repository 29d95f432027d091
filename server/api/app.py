"""The ASGI app: versioned HTTP API, control websocket, metrics, health, demo page.

``create_app`` takes an already-loaded engine (tests, ``avatar serve`` after loading)
or loads one in its lifespan from the settings, and puts together the routers, one per
concern: operations (:mod:`~server.api.ops`), what a session is chosen from
(:mod:`~server.api.catalog`), sessions (:mod:`~server.api.sessions`), the control socket
(:mod:`~server.api.control_route`), WHIP/WHEP (:mod:`~server.api.whip`) and personal avatars
(:mod:`~server.api.avatars`). Every error leaves as JSON ``{"error": {"code", "message"}}``
with the right status. What the process needs once (log redaction, the ICE network) is
:func:`server.api.process.prepare_process`'s, not the app's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI

from engine.heap import freeze_heap
from server.api import avatars, catalog, control_route, ops, sessions, whip
from server.api.body_limit import BodyLimit, route_limit
from server.api.cors import allow_origins
from server.api.engine_adapter import Engine, encode_jpeg, sample_rate_of
from server.api.engine_setup import engine_client
from server.api.error_answers import answer_errors
from server.api.forwarded import GatewayForwarded
from server.api.io_threads import start_io_threads, stop_io_threads
from server.api.json_errors import JsonErrors
from server.api.limits import ClientLimits
from server.api.local_adapter import create_backend
from server.api.page import serve_page
from server.api.report import node_report
from server.base.engine_port import EngineError
from server.base.metrics import ServerMetrics
from server.config import Settings
from server.session.manager import SessionManager
from server.voice.tts import TTSBackend

log = logging.getLogger(__name__)


async def started_engine(settings: Settings, engine: Engine | None) -> Engine:
    """``engine``, or the one the settings name, started; what it can do logged."""
    running = engine or Engine(engine_client(settings))
    t0 = time.perf_counter()
    await running.start()
    config = settings.engine.config
    if not running.available:
        log.error("no engine worker started; the server is degraded and refuses sessions")
        return running
    log.info("engine %s up in %.1f s: %s", config, time.perf_counter() - t0,
             ", ".join(f"worker {w.index} pid {w.pid} on {w.device}, capacity {w.capacity}"
                       for w in running.workers()))
    for w in running.workers():
        if w.stats is not None and w.stats.real_time == 0:
            uncounted = (settings.engine.engine_capacity_margin or 0.0) < 0
            takes = ("sessions up to max_sessions all the same (a capacity margin below 0)" if uncounted else
                     "one session at a time, at the cheapest quality that keeps up")
            log.warning("engine worker %d on %s is too slow for one %s session in real time at its best "
                        "quality: it takes %s", w.index, w.device, config, takes)
    return running


def lifespan(settings: Settings, engine: Engine | None, speech: TTSBackend | None,
             metrics: ServerMetrics) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """The app's life: I/O threads, the engine, the TTS backend and the session manager, up while it serves."""

    @contextlib.asynccontextmanager
    async def running(app: FastAPI) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        io_threads = app.state.io_threads = start_io_threads(loop)
        engine_running = await started_engine(settings, engine)
        voice = settings.speech
        backend = speech or await asyncio.to_thread(
            create_backend, voice.tts, sample_rate_of(settings.engine.config), voice.piper_model
        )
        manager = app.state.manager = SessionManager(settings, engine_running, metrics,
                                                     settings.session.default_quality, backend)
        manager.start()
        freeze_heap()
        try:
            yield
        finally:
            await manager.stop()
            await engine_running.close()
            stop_io_threads(loop, io_threads)

    return running


def create_app(
    settings: Settings | None = None, engine: Engine | None = None, speech: TTSBackend | None = None
) -> FastAPI:
    settings = settings or Settings.from_env()
    metrics = ServerMetrics()
    app = FastAPI(
        title="avatar-engine",
        version="1",
        lifespan=lifespan(settings, engine, speech, metrics),
        description="Real-time streaming avatar: WebRTC media, websocket control.",
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.gateway_secret = None  # set by a cluster node: X-Forwarded-For is trusted with it only
    app.state.node_name = ""  # a node's web process: its name behind the node's front
    app.state.report = lambda node, address: node_report(app, node, address)  # what a front learns of it
    answer_errors(app, EngineError)
    s = settings
    app.include_router(ops.create_router(s.engine, metrics))
    app.include_router(catalog.create_router(s.session, s.access, s.limits, len(s.network.ice_servers), encode_jpeg))
    clients = ClientLimits.of(s.access, s.timing.offer_timeout_s)
    app.include_router(sessions.create_router(s.access, s.network, s.limits, clients, metrics))
    app.include_router(control_route.create_router(s.limits, s.timing.control_handover_s, metrics))
    serve_page(app)
    app.include_router(whip.create_router(s.limits, s.network))
    app.include_router(avatars.create_router(s.access))
    allow_origins(app, s.access.cors_origins)
    app.add_middleware(GatewayForwarded, secret=lambda: app.state.gateway_secret)
    app.add_middleware(BodyLimit, limit_for=lambda path: route_limit(s.limits, path))
    app.add_middleware(JsonErrors)  # outermost: errors written by any middleware are JSON too
    return app
