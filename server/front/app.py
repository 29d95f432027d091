"""The front's HTTP app: the routes a front answers itself and those it passes to its apps.

``POST /v1/sessions`` goes to the app with the most free capacity (a full one, 503, passes it on to
the next) and answers with the app's session plus ``node`` (the app's name). Everything else about
a session — offer/answer, ``DELETE``, WHIP/WHEP, the control websocket — is proxied to the app
holding it, so clients need one address; media flows between the client and that app directly.
``/healthz`` is ``degraded`` (503) while no app serves, ``/metrics`` has per-app figures.
``/v1/avatars`` (personal avatars) goes to the app a name hashes to; the apps share one store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import httpx
from fastapi import FastAPI, Request, Response, WebSocket
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from server.api.body_limit import BodyLimit, route_limit
from server.api.forwarded import GATEWAY_HEADER
from server.api.limits import ClientLimits, bearer, client_key
from server.base.errors import ApiError
from server.base.protocol import ErrorResponse
from server.config import Settings
from server.front.backends import Backend, Members
from server.front.metrics import GatewayMetrics
from server.front.placement import enrolling_node, ranked
from server.front.proxy import forward, relayed
from server.front.relay import relay_control

log = logging.getLogger(__name__)
WEB_DIR = Path(__file__).resolve().parents[2] / "web"
SESSION_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
NODE_TIMEOUT_S = 30.0  # an offer is answered once the node's ICE gathering is done


def _error(status: int, code: str, message: str, retry_after: int | None = None) -> JSONResponse:
    body = ErrorResponse.model_validate({"error": {"code": code, "message": message}})
    retry_after = 5 if retry_after is None and status == 503 else retry_after
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def create_front(settings: Settings, membership: Members, metrics: GatewayMetrics, *, title: str, description: str,
                 around: Callable[[FastAPI], AbstractAsyncContextManager] | None = None,
                 backends: str = "nodes", none_serving: str = "no avatar node serves",
                 render_metrics: Callable[[], Awaitable[bytes]] | None = None,
                 capacity: Callable[[list[Backend]], int] | None = None,
                 rank: Callable[[Iterable[Backend]], list[Backend]] = ranked) -> FastAPI:
    """The front over ``membership``'s apps. ``around(app)`` brings up what the apps need before the
    front follows them (and ends it after); ``backends`` names them in ``/healthz``, ``none_serving``
    is the 503 message while none serves; ``render_metrics`` writes ``/metrics`` (default: the
    front's own ``metrics``); ``capacity`` counts the serving apps' room (default: the sum); ``rank``
    orders the apps a new session is offered to (default: most room first)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with around(app) if around is not None else contextlib.nullcontext():
            following = asyncio.create_task(membership.run(), name="front-membership")
            async with httpx.AsyncClient(timeout=NODE_TIMEOUT_S, headers={GATEWAY_HEADER: membership.secret}) as http:
                app.state.http = http
                try:
                    yield
                finally:
                    following.cancel()
                    await asyncio.gather(following, return_exceptions=True)

    app = FastAPI(title=title, version="1", lifespan=lifespan, description=description)
    # Per-client limits on creating sessions, front-wide: each app keeps its own as well, but only
    # the front sees every app's creations (a client's token is granted them once, not per app).
    limits = ClientLimits(settings.client_sessions_per_minute, settings.client_max_unoffered, settings.offer_timeout_s)
    offered: set[str] = set()  # sessions whose offer (or WHIP offer) a node has answered

    def waiting_for_offer(session_id: str) -> bool:
        return session_id not in offered and membership.holder(session_id) is not None

    app.state.settings = settings
    app.state.membership = membership
    app.state.metrics = metrics

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message, exc.retry_after)

    def holder(session_id: str) -> Backend:
        node = membership.holder(session_id)
        if node is None:
            raise ApiError(404, "unknown_session", f"no session {session_id!r}")
        return node

    def any_node() -> Backend:
        nodes = rank(membership.nodes.values())
        if not nodes:
            metrics.sessions_rejected.labels("no_nodes").inc()
            raise ApiError(503, "no_nodes", none_serving)
        return nodes[0]

    @app.get("/healthz", tags=["ops"])
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
            body["reason"] = none_serving
        elif len(alive) < len(listed):
            body["reason"] = f"{len(listed) - len(alive)} {backends} not serving (starting or failed)"
        return JSONResponse(body, status_code=200 if alive else 503)

    @app.get("/metrics", tags=["ops"])
    async def prometheus() -> Response:
        if render_metrics is not None:
            return Response(await render_metrics(), media_type=CONTENT_TYPE_LATEST)
        metrics.observe(membership.listing())
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/info", tags=["sessions"])
    async def info(request: Request) -> Response:
        return relayed(await forward(request.app.state.http, any_node(), request))

    @app.post("/v1/sessions", status_code=201, tags=["sessions"])
    async def create_session(request: Request) -> Response:
        """Tried on the nodes by free capacity; a node that is full (503) passes it on to the next.
        Nodes check the bearer token (the gateway's, passed to them with its settings)."""
        any_node()
        if settings.auth_token is not None and bearer(request) != settings.auth_token:
            raise ApiError(401, "bad_token", "creating a session needs the server's bearer token")
        client = client_key(request.client.host if request.client else None,
                            bearer(request) if settings.auth_token is not None else None)
        offered.intersection_update(sid for node in membership.nodes.values() for sid in node.sessions)
        with limits.admitted(client, waiting_for_offer, metrics.sessions_rejected.labels("rate_limited").inc) as made:
            return await place(request, made)

    async def place(request: Request, made) -> Response:
        body = await request.body()
        refusal: httpx.Response | ApiError | None = None
        for node in rank(membership.nodes.values()):
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

    def enrolling(name: str) -> Backend:
        """The node a personal avatar's name hashes to (its progress is read where it runs); the
        nodes share one store folder (``AVATAR_STORE``), so a stored avatar is every node's."""
        node = enrolling_node(membership.nodes.values(), name)
        if node is None:
            raise ApiError(503, "no_nodes", none_serving)
        return node

    @app.api_route("/v1/avatars", methods=["GET", "POST"], tags=["avatars"])
    async def avatars(request: Request) -> Response:
        """Personal avatars: enrolled on the node their name hashes to (the clip streamed on as it
        arrives, never held here), listed by any node."""
        if request.method == "GET":
            return relayed(await forward(request.app.state.http, any_node(), request))
        node = enrolling(request.query_params.get("name", ""))
        return relayed(await forward(request.app.state.http, node, request, body=request.stream()))

    @app.api_route("/v1/avatars/{name}", methods=["GET", "DELETE"], tags=["avatars"])
    async def avatar(name: str, request: Request) -> Response:
        return relayed(await forward(request.app.state.http, enrolling(name), request))

    @app.api_route("/v1/sessions/{session_id}", methods=["DELETE"], tags=["sessions"])
    @app.api_route("/v1/sessions/{session_id}/{rest:path}", methods=SESSION_METHODS, tags=["sessions"])
    async def session_request(session_id: str, request: Request, rest: str = "") -> Response:
        node = holder(session_id)
        answer = await forward(request.app.state.http, node, request)
        if request.method == "DELETE" and not rest and answer.status_code == 204:
            node.sessions.discard(session_id)
        if request.method == "POST" and rest in ("offer", "whip") and answer.status_code in (200, 201):
            offered.add(session_id)
        return relayed(answer)

    @app.websocket("/v1/sessions/{session_id}/control")
    async def control(ws: WebSocket, session_id: str) -> None:
        await relay_control(ws, membership.holder(session_id), session_id, settings.max_control_bytes + 4096)

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html")

    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
    app.add_middleware(BodyLimit, limit_for=lambda path: route_limit(settings, path))
    return app

