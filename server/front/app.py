"""The front's HTTP app: the routes a front answers itself and those it passes to its apps.

``POST /v1/sessions`` goes to the app with the most free capacity (a full one, 503, passes it on to
the next) and answers with the app's session plus ``node`` (the app's name). Everything else about
a session — offer/answer, ``DELETE``, WHIP/WHEP, the control websocket — is proxied to the app
holding it, so clients need one address; media flows between the client and that app directly
(:mod:`~server.front.sessions`). ``/healthz`` is ``degraded`` (503) while no app serves,
``/metrics`` has per-app figures (:mod:`~server.front.ops`). ``/v1/avatars`` (personal avatars)
goes to the app a name hashes to; the apps share one store (:mod:`~server.front.avatars`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager

import httpx
from fastapi import FastAPI

from server.api.body_limit import BodyLimit, route_limit
from server.api.error_answers import error
from server.api.forwarded import GATEWAY_HEADER
from server.api.limits import ClientLimits
from server.api.page import serve_page
from server.base.errors import ApiError
from server.config import AccessSettings, InputLimits
from server.front import avatars, ops, sessions
from server.front.backends import Backend, Members
from server.front.metrics import GatewayMetrics
from server.front.placement import ranked
from server.front.routing import Routing

NODE_TIMEOUT_S = 30.0  # an offer is answered once the node's ICE gathering is done


def following(membership: Members, around: Callable[[FastAPI], AbstractAsyncContextManager] | None):
    """The front's life: ``around(app)`` brings up what the apps need before the front follows
    them (and ends it after); an HTTP client to the apps, with the front's secret."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with around(app) if around is not None else contextlib.nullcontext():
            task = asyncio.create_task(membership.run(), name="front-membership")
            async with httpx.AsyncClient(timeout=NODE_TIMEOUT_S, headers={GATEWAY_HEADER: membership.secret}) as http:
                app.state.http = http
                try:
                    yield
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)

    return lifespan


def create_front(membership: Members, metrics: GatewayMetrics, access: AccessSettings, limits: InputLimits,
                 offer_timeout_s: float, *, title: str, description: str,
                 around: Callable[[FastAPI], AbstractAsyncContextManager] | None = None,
                 backends: str = "nodes", none_serving: str = "no avatar node serves",
                 render_metrics: Callable[[], Awaitable[bytes]] | None = None,
                 capacity: Callable[[list[Backend]], int] | None = None,
                 rank: Callable[[Iterable[Backend]], list[Backend]] = ranked) -> FastAPI:
    """The front over ``membership``'s apps. ``around(app)`` brings up what the apps need before the
    front follows them (and ends it after); ``backends`` names them in ``/healthz``, ``none_serving``
    is the 503 message while none serves; ``render_metrics`` writes ``/metrics`` (default: the
    front's own ``metrics``); ``capacity`` counts the serving apps' room (default: the sum); ``rank``
    orders the apps a new session is offered to (default: most room first). ``access`` and ``limits``
    are the apps' own (the token, per-client limits, body and message sizes); a session not offered
    within ``offer_timeout_s`` is the apps' to reap."""
    app = FastAPI(title=title, version="1", lifespan=following(membership, around), description=description)
    app.state.membership = membership
    app.state.metrics = metrics
    routing = Routing(membership, metrics, rank, none_serving)

    @app.exception_handler(ApiError)
    async def _api_error(_, exc: ApiError):
        return error(exc.status, exc.code, exc.message, exc.retry_after)

    app.include_router(ops.create_router(routing, backends, render_metrics, capacity))
    clients = ClientLimits.of(access, offer_timeout_s)
    app.include_router(sessions.create_router(routing, access, clients, limits.max_control_bytes))
    app.include_router(avatars.create_router(routing))
    serve_page(app)
    app.add_middleware(BodyLimit, limit_for=lambda path: route_limit(limits, path))
    return app
