"""Operations: ``/healthz``, ``/v1/engine`` (the engine's workers), ``/metrics`` (Prometheus), and
the report a node's web process gives the front it stands behind."""

from __future__ import annotations

import dataclasses
import hmac

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from server.api.forwarded import GATEWAY_HEADER
from server.api.report import REPORT_PATH
from server.base.errors import ApiError
from server.base.metrics import CONTENT_TYPE_LATEST, ServerMetrics
from server.config import EngineSettings
from server.session.manager import SessionManager


def manager(request: Request) -> SessionManager:
    """The app's session manager (set up by its lifespan)."""
    return request.app.state.manager


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


def create_router(engine: EngineSettings, metrics: ServerMetrics) -> APIRouter:
    router = APIRouter(tags=["ops"])

    @router.get("/healthz")
    async def healthz(request: Request) -> JSONResponse:
        m = manager(request)
        workers = m.engine.workers()
        alive = sum(1 for w in workers if w.alive)
        status = "ok" if workers and alive == len(workers) else "degraded"
        body = {
            "status": status,
            "sessions": len(m.sessions),
            "max_sessions": engine.max_sessions,
            "capacity": m.engine.capacity(),
            "web_room": m.room(),  # sessions this process's event loop takes (LoopLoad)
            "loop_busy": round(m.loop_load.busy, 3),
            "workers": len(workers),
            "workers_alive": alive,
            "config": engine.config,
            "device": engine.device,
        }
        return JSONResponse(body, status_code=200 if alive else 503)

    @router.get("/v1/engine")
    async def engine_workers(request: Request) -> dict:
        workers = manager(request).engine.workers()
        return {"workers": [worker_json(w) for w in workers], "real_time_by_render": real_time_by_render(workers)}

    @router.get(REPORT_PATH, include_in_schema=False)
    async def report(request: Request) -> dict:
        """This app's report to the front it stands behind (a node's web process): only for the front."""
        secret = request.app.state.gateway_secret
        if secret is None or not hmac.compare_digest(request.headers.get(GATEWAY_HEADER, ""), secret):
            raise ApiError(404, "http_error", "Not Found")
        return dataclasses.asdict(request.app.state.report(request.app.state.node_name, ""))

    @router.get("/metrics")
    async def prometheus(request: Request) -> Response:
        pool = manager(request).engine.client
        metrics.engine.update(manager(request).engine.workers(), getattr(pool, "lost", 0),
                              getattr(pool, "restarts", 0))
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return router
