"""A front's ``/healthz`` (``degraded``, 503, while no app serves) and ``/metrics``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from server.front.backends import Backend
from server.front.routing import Routing


def create_router(routing: Routing, backends: str, render_metrics: Callable[[], Awaitable[bytes]] | None,
                  capacity: Callable[[list[Backend]], int] | None) -> APIRouter:
    """``backends`` names the apps in ``/healthz``; ``render_metrics`` writes ``/metrics`` (default:
    the front's own metrics); ``capacity`` counts the serving apps' room (default: the sum)."""
    router = APIRouter(tags=["ops"])
    membership, metrics = routing.membership, routing.metrics

    @router.get("/healthz")
    async def healthz() -> JSONResponse:
        listed = membership.listing()
        alive = [n for n in listed if n.alive]
        body = {
            "status": "ok" if alive and len(alive) == len(listed) else "degraded",
            backends: len(listed),
            f"{backends}_alive": len(alive),
            "sessions": sum(len(n.sessions) for n in alive),
            "capacity": capacity(alive) if capacity is not None else sum(n.capacity for n in alive),
        }
        if not listed:
            body["reason"] = routing.none_serving
        elif len(alive) < len(listed):
            body["reason"] = f"{len(listed) - len(alive)} {backends} not serving (starting or failed)"
        return JSONResponse(body, status_code=200 if alive else 503)

    @router.get("/metrics")
    async def prometheus() -> Response:
        if render_metrics is not None:
            return Response(await render_metrics(), media_type=CONTENT_TYPE_LATEST)
        metrics.observe(membership.listing())
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return router
