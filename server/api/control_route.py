"""``/v1/sessions/{id}/control``: the session's control websocket (:mod:`server.api.control`)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, WebSocket

from server.api.control import serve_control
from server.base.metrics import ServerMetrics
from server.config import InputLimits


def create_router(limits: InputLimits, handover_s: float, metrics: ServerMetrics) -> APIRouter:
    router = APIRouter()

    @router.websocket("/v1/sessions/{session_id}/control")
    async def control(
        ws: WebSocket,
        session_id: str,
        token: str | None = Query(None),
        role: Literal["control", "observer"] = Query("control"),
    ) -> None:
        await serve_control(ws, ws.app.state.manager, session_id, token, metrics, limits, handover_s, role)

    return router
