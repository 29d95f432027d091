"""The ASGI app: versioned HTTP API, control websocket, metrics, health, demo page.

``create_app`` takes an already-loaded engine (tests, ``avatar serve`` after loading)
or loads one in its lifespan from the settings. Every error leaves as JSON
``{"error": {"code", "message"}}`` with the right status.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

from aiortc import RTCSessionDescription
from fastapi import FastAPI, Query, Request, Response, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from server.api.avatars import create_router as avatars_router
from server.api.body_limit import BodyLimit, route_limit
from server.api.control import serve_control
from server.api.cors import allow_origins
from server.api.engine_adapter import Engine, encode_jpeg, sample_rate_of
from server.api.engine_setup import engine_client
from server.api.forwarded import GATEWAY_HEADER, GatewayForwarded
from server.api.io_threads import start_io_threads, stop_io_threads
from server.api.json_errors import JsonErrors
from server.api.limits import ClientLimits, bearer, client_key
from server.api.local_adapter import create_backend
from server.api.redact import install_redaction
from server.api.report import REPORT_PATH, node_report
from server.api.whip import create_router as whip_router
from server.base.engine_port import EngineError
from server.base.errors import ApiError
from server.base.metrics import CONTENT_TYPE_LATEST, ServerMetrics
from server.base.protocol import ErrorResponse, SessionCreate, SessionCreated, SessionDescription
from server.config import Settings
from server.media import ice_network
from server.media.peer import BadOffer
from server.session.manager import SessionManager
from server.voice.tts import TTSBackend

log = logging.getLogger(__name__)
WEB_DIR = Path(__file__).resolve().parents[2] / "web"
API = "/v1"


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = ErrorResponse.model_validate({"error": {"code": code, "message": message}})
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)



def real_time_by_render(workers) -> dict[str, int]:
    """Sessions of each render kind (decoded, drawn, photo) the live workers hold in real time,
    as their start-up measurements and the load since estimate: a node's capacity per kind."""
    total: dict[str, int] = {}
    for w in workers:
        if w.alive and w.stats is not None:
            for render, n in w.stats.real_time_by_render.items():
                total[render] = total.get(render, 0) + n
    return total


def worker_json(w) -> dict:
    """One engine worker as ``GET /v1/engine`` shows it."""
    stats = w.stats
    return {
        "index": w.index,
        "pid": w.pid,
        "device": w.device,
        "alive": w.alive,
        "state": w.state,
        "sessions": w.sessions,
        "session_ids": list(w.session_ids),
        "capacity": w.capacity,
        "settling_s": w.settling_s,
        "real_time_sessions": stats.real_time if stats else 0,
        "real_time_by_render": stats.real_time_by_render if stats else {},
        "batch_mean": stats.batch_mean if stats else 0.0,
        "shared_batches": stats.shared_batches if stats else 0,  # batches over several web processes' sessions
        "load": float(stats.costs.get("load", 1.0)) if stats else 1.0,
        "chunk_ms": stats.chunk_ms if stats else {},
        "quality_levels": stats.quality_levels if stats else {},
        "quality_changes": stats.quality_changes if stats else {},
        "error": w.error,
        "start_failures": w.start_failures,
        "next_attempt_s": w.next_attempt_s,
    }


def create_app(
    settings: Settings | None = None, engine: Engine | None = None, speech: TTSBackend | None = None
) -> FastAPI:
    settings = settings or Settings.from_env()
    install_redaction()
    limits = ClientLimits(settings.client_sessions_per_minute, settings.client_max_unoffered, settings.offer_timeout_s)
    metrics = ServerMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        io_threads = app.state.io_threads = start_io_threads(loop)
        running = engine or Engine(engine_client(settings))
        t0 = time.perf_counter()
        await running.start()
        if running.available:
            log.info("engine %s up in %.1f s: %s", settings.config, time.perf_counter() - t0,
                     ", ".join(f"worker {w.index} pid {w.pid} on {w.device}, capacity {w.capacity}"
                               for w in running.workers()))
            for w in running.workers():
                if w.stats is not None and w.stats.real_time == 0:
                    log.warning("engine worker %d on %s is too slow for one %s session in real time at its best "
                                "quality: it takes one session at a time, at the cheapest quality that keeps up",
                                w.index, w.device, settings.config)
        else:
            log.error("no engine worker started; the server is degraded and refuses sessions")
        backend = speech or await asyncio.to_thread(
            create_backend, settings.tts, sample_rate_of(settings.config), settings.piper_model
        )
        manager = SessionManager(settings, running, metrics, settings.default_quality, backend)
        app.state.manager = manager
        manager.start()
        try:
            yield
        finally:
            await manager.stop()
            await running.close()
            stop_io_threads(loop, io_threads)

    app = FastAPI(
        title="avatar-engine",
        version="1",
        lifespan=lifespan,
        description="Real-time streaming avatar: WebRTC media, websocket control.",
    )
    app.state.settings = settings
    app.state.metrics = metrics

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        retry = exc.retry_after if exc.retry_after is not None else 5 if exc.status == 503 else None
        return _error(exc.status, exc.code, exc.message, None if retry is None else {"Retry-After": str(retry)})

    @app.exception_handler(EngineError)
    async def _engine_error(_: Request, exc: EngineError) -> JSONResponse:
        return _error(503, exc.code, exc.message, {"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        detail = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in errors[:3])
        return _error(400, "bad_request", detail or "malformed request")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, "http_error", str(exc.detail))

    def manager(request: Request) -> SessionManager:
        return request.app.state.manager

    @app.get("/healthz", tags=["ops"])
    async def healthz(request: Request) -> JSONResponse:
        m = manager(request)
        workers = m.engine.workers()
        alive = sum(1 for w in workers if w.alive)
        status = "ok" if workers and alive == len(workers) else "degraded"
        body = {
            "status": status,
            "sessions": len(m.sessions),
            "max_sessions": settings.max_sessions,
            "capacity": m.engine.capacity(),
            "web_room": m.room(),  # sessions this process's event loop takes (LoopLoad)
            "loop_busy": round(m.loop_load.busy, 3),
            "workers": len(workers),
            "workers_alive": alive,
            "config": settings.config,
            "device": settings.device,
        }
        return JSONResponse(body, status_code=200 if alive else 503)

    @app.get(f"{API}/engine", tags=["ops"])
    async def engine_workers(request: Request) -> dict:
        workers = manager(request).engine.workers()
        return {"workers": [worker_json(w) for w in workers], "real_time_by_render": real_time_by_render(workers)}

    @app.get(REPORT_PATH, include_in_schema=False)
    async def report(request: Request) -> dict:
        """This app's report to the front it stands behind (a node's web process): only for the front."""
        secret = request.app.state.gateway_secret
        if secret is None or not hmac.compare_digest(request.headers.get(GATEWAY_HEADER, ""), secret):
            raise ApiError(404, "http_error", "Not Found")
        return dataclasses.asdict(request.app.state.report(request.app.state.node_name, ""))

    @app.get("/metrics", tags=["ops"])
    async def prometheus(request: Request) -> Response:
        pool = manager(request).engine.client
        metrics.engine.update(manager(request).engine.workers(), getattr(pool, "lost", 0),
                               getattr(pool, "restarts", 0))
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    def page_avatar(m) -> str:
        """The face the demo page starts on: the settings' where the engine offers it."""
        offered = m.engine.avatars + [p.name for p in m.engine.portraits]
        if settings.page_avatar in offered:
            return settings.page_avatar
        return settings.default_avatar or m.engine.default_avatar

    @app.get(f"{API}/info", tags=["sessions"])
    async def info(request: Request) -> dict:
        m = manager(request)
        base = m.engine.info
        return {
            "avatars": m.engine.avatars,
            "portraits": [{"name": p.name, "label": p.label, "shows": p.shows, "licence": p.licence,
                           "attribution": p.attribution, "url": f"{API}/portraits/{p.name}"}
                          for p in m.engine.portraits],
            "default_avatar": settings.default_avatar or m.engine.default_avatar,
            "page_avatar": page_avatar(m),
            "personal_avatars": m.personal.names(),
            "reference_images": base.accepts_images,
            "drawn": settings.drawn and base.accepts_images,  # what a session gets unless it asks
            "max_image_bytes": settings.max_image_bytes,
            "presets": list(base.presets),
            "default_preset": m.default_preset,
            "modes": ["mirror", "agent"],
            "ice_server_count": len(settings.ice_servers),  # how many, never the credentials
            "default_mode": settings.default_mode,
            "fps": base.fps,
            "sample_rate": base.sample_rate,
            "width": base.frame_size[1],
            "height": base.frame_size[0],
            "auth_required": settings.auth_token is not None,
        }

    @app.get(f"{API}/portraits/{{name}}", tags=["sessions"], response_class=FileResponse)
    async def portrait(request: Request, name: str) -> FileResponse:
        """A bundled portrait's JPEG (the page's picker shows it)."""
        for p in manager(request).engine.portraits:
            if p.name == name:
                return FileResponse(p.path, media_type="image/jpeg")
        raise ApiError(404, "unknown_portrait", f"no bundled portrait {name!r}")

    @app.post(f"{API}/photos/framing", tags=["sessions"], response_class=Response,
              responses={400: {"model": ErrorResponse}, 401: {"model": ErrorResponse}, 413: {"model": ErrorResponse}})
    async def photo_framing(request: Request) -> Response:
        """A photograph (raw PNG/JPEG/WebP/GIF body) checked as ``image`` in a new session would be:
        the 512² JPEG a session of it starts from (its face framed), or the reason it is refused."""
        if settings.auth_token is not None and bearer(request) != settings.auth_token:
            raise ApiError(401, "bad_token", "checking a photo needs the server's bearer token")
        photo = await manager(request).images.photo(await request.body())
        return Response(encode_jpeg(photo.image), media_type="image/jpeg")

    @app.post(
        f"{API}/sessions",
        status_code=201,
        tags=["sessions"],
        response_model=SessionCreated,
        responses={401: {"model": ErrorResponse}, 503: {"model": ErrorResponse}},
    )
    async def create_session(request: Request, body: SessionCreate | None = None) -> SessionCreated:
        if settings.auth_token is not None and bearer(request) != settings.auth_token:
            raise ApiError(401, "bad_token", "creating a session needs the server's bearer token")
        m = manager(request)
        client = client_key(request.client.host if request.client else None,
                            bearer(request) if settings.auth_token is not None else None)
        rejected = metrics.sessions_rejected.labels("rate_limited").inc
        with limits.admitted(client, m.waiting_for_offer, rejected) as created:
            session = await m.create(body or SessionCreate())
            created(session.id)
        return SessionCreated(
            session_id=session.id,
            token=session.token,
            ice_servers=settings.ice_servers,
            mode=session.mode,
            avatar=session.avatar,
            drawn=session.drawn,
            fps=session.fps,
            sample_rate=session.sample_rate,
            width=session.width,
            height=session.height,
        )

    @app.post(
        f"{API}/sessions/{{session_id}}/offer",
        tags=["sessions"],
        response_model=SessionDescription,
        responses={
            400: {"model": ErrorResponse},
            401: {"model": ErrorResponse},
            404: {"model": ErrorResponse},
        },
    )
    async def offer(session_id: str, body: SessionDescription, request: Request) -> SessionDescription:
        session = manager(request).get(session_id, bearer(request))
        if body.type != "offer":
            raise ApiError(400, "bad_sdp", "expected an SDP of type 'offer'")
        if len(body.sdp.encode()) > settings.max_sdp_bytes:
            raise ApiError(413, "sdp_too_large", f"SDP over {settings.max_sdp_bytes} bytes")
        try:
            answer = await session.accept_offer(RTCSessionDescription(sdp=body.sdp, type="offer"))
        except BadOffer as exc:
            manager(request).close_soon(session_id, "bad_offer")
            raise ApiError(400, "bad_sdp", str(exc)) from exc
        except ApiError:
            raise
        except Exception:
            manager(request).close_soon(session_id, "offer_failed")
            raise
        return SessionDescription(sdp=answer.sdp, type="answer")

    @app.get(
        f"{API}/sessions/{{session_id}}/trace",
        tags=["sessions"],
        responses={401: {"model": ErrorResponse}, 404: {"model": ErrorResponse}},
    )
    async def trace(session_id: str, request: Request) -> dict[str, list]:
        """The session's latency trace: clock-stamped logs of the last half minute (microphone
        blocks, feed blocks, engine frames, video slots released), to split a latency into its terms."""
        return manager(request).get(session_id, bearer(request)).trace.to_json()

    @app.delete(
        f"{API}/sessions/{{session_id}}",
        status_code=204,
        tags=["sessions"],
        responses={401: {"model": ErrorResponse}, 404: {"model": ErrorResponse}},
    )
    async def delete_session(session_id: str, request: Request) -> Response:
        manager(request).get(session_id, bearer(request))
        await manager(request).close(session_id, "deleted")
        return Response(status_code=204)

    @app.websocket(f"{API}/sessions/{{session_id}}/control")
    async def control(
        ws: WebSocket,
        session_id: str,
        token: str | None = Query(None),
        role: Literal["control", "observer"] = Query("control"),
    ) -> None:
        await serve_control(ws, ws.app.state.manager, session_id, token, metrics, role)

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html")

    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
    app.include_router(whip_router())
    app.include_router(avatars_router())
    allow_origins(app, settings.cors_origins)
    ice_network.configure(ice_network.IceNetwork.of(settings.ice_ports, settings.public_address))
    app.state.gateway_secret = None  # set by a cluster node: X-Forwarded-For is trusted with it only
    app.state.node_name = ""  # a node's web process: its name behind the node's front
    app.state.report = lambda node, address: node_report(app, node, address)  # what a front learns of it
    app.add_middleware(GatewayForwarded, secret=lambda: app.state.gateway_secret)
    app.add_middleware(BodyLimit, limit_for=lambda path: route_limit(settings, path))
    app.add_middleware(JsonErrors)  # outermost: errors written by any middleware are JSON too
    return app
