"""A front's ``/v1/avatars``: personal avatars enrolled on the app their name hashes to (the clip
streamed on as it arrives, never held here), listed by any app; the apps share one store."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from server.front.proxy import forward, relayed
from server.front.routing import Routing


def create_router(routing: Routing) -> APIRouter:
    router = APIRouter(prefix="/v1/avatars", tags=["avatars"])

    @router.api_route("", methods=["GET", "POST"])
    async def avatars(request: Request) -> Response:
        if request.method == "GET":
            return relayed(await forward(request.app.state.http, routing.any_node(), request))
        node = routing.enrolling(request.query_params.get("name", ""))
        return relayed(await forward(request.app.state.http, node, request, body=request.stream()))

    @router.api_route("/{name}", methods=["GET", "DELETE"])
    async def avatar(name: str, request: Request) -> Response:
        return relayed(await forward(request.app.state.http, routing.enrolling(name), request))

    return router
