"""A front's sessions: ``POST /v1/sessions`` placed on the apps by their room, everything else about
a session (offer, ``DELETE``, WHIP/WHEP, the control socket) passed to the app holding it."""

from __future__ import annotations

import httpx
from fastapi import APIRouter, Request, Response, WebSocket
from fastapi.responses import JSONResponse

from server.api.limits import ClientLimits, check_token, client_of
from server.base.errors import ApiError
from server.config import AccessSettings
from server.front.proxy import forward, relayed
from server.front.relay import relay_control
from server.front.routing import Routing

SESSION_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def create_router(routing: Routing, access: AccessSettings, clients: ClientLimits, max_control_bytes: int) -> APIRouter:
    """``clients``: per-client limits on creating sessions, front-wide (each app keeps its own as
    well, but only the front sees every app's creations: a client's token is granted them once)."""
    router = APIRouter(tags=["sessions"])
    metrics = routing.metrics

    @router.get("/v1/info")
    async def info(request: Request) -> Response:
        return relayed(await forward(request.app.state.http, routing.any_node(), request))

    @router.post("/v1/sessions", status_code=201)
    async def create_session(request: Request) -> Response:
        """Tried on the nodes by free capacity; a node that is full (503) passes it on to the next.
        Nodes check the bearer token (the gateway's, passed to them with its settings)."""
        routing.any_node()
        check_token(request, access.auth_token, "creating a session needs the server's bearer token")
        routing.forget_ended()
        rejected = metrics.sessions_rejected.labels("rate_limited").inc
        with clients.admitted(client_of(request, access.auth_token), routing.waiting_for_offer, rejected) as made:
            return await place(request, made)

    async def place(request: Request, made) -> Response:
        body = await request.body()
        refusal: httpx.Response | ApiError | None = None
        for node in routing.rank(routing.membership.nodes.values()):
            try:
                answer = await forward(request.app.state.http, node, request, body=body)
            except ApiError as exc:
                refusal = exc
                continue
            if answer.status_code == 503:
                refusal = answer
                continue
            if answer.status_code != 201:
                return relayed(answer)
            created = answer.json()
            node.placed(created["session_id"])
            made(created["session_id"])
            metrics.sessions_placed.labels(node.node).inc()
            return JSONResponse({**created, "node": node.node}, status_code=201)
        metrics.sessions_rejected.labels("at_capacity").inc()
        if isinstance(refusal, ApiError):
            raise refusal
        return relayed(refusal)

    @router.api_route("/v1/sessions/{session_id}", methods=["DELETE"])
    @router.api_route("/v1/sessions/{session_id}/{rest:path}", methods=SESSION_METHODS)
    async def session_request(session_id: str, request: Request, rest: str = "") -> Response:
        node = routing.holder(session_id)
        answer = await forward(request.app.state.http, node, request)
        if request.method == "DELETE" and not rest and answer.status_code == 204:
            node.sessions.discard(session_id)
        if request.method == "POST" and rest in ("offer", "whip") and answer.status_code in (200, 201):
            routing.offered.add(session_id)
        return relayed(answer)

    @router.websocket("/v1/sessions/{session_id}/control")
    async def control(ws: WebSocket, session_id: str) -> None:
        await relay_control(ws, routing.membership.holder(session_id), session_id, max_control_bytes + 4096)

    return router
