"""Signalling through the gateway: an HTTP request about a session goes to the node that holds it.

Only what the API uses crosses (bearer token, SDP and JSON bodies, WHIP/WHEP's ``If-Match``,
``Location``, ``ETag``, ``Link``), and the client's address rides in ``X-Forwarded-For``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
from fastapi import Request, Response
from starlette.requests import ClientDisconnect

from server.base.errors import ApiError
from server.front.backends import Backend

REQUEST_HEADERS = frozenset({"authorization", "content-type", "accept", "if-match"})
RESPONSE_HEADERS = frozenset({"content-type", "location", "etag", "link", "retry-after", "allow"})


async def forward(http: httpx.AsyncClient, node: Backend, request: Request, path: str | None = None,
                  body: bytes | AsyncIterator[bytes] | None = None) -> httpx.Response:
    """``request`` (or ``body`` to ``path``: bytes, or chunks streamed on as they arrive) sent on to
    ``node``; 502 ``node_unreachable`` if it does not answer."""
    headers = {k: v for k, v in request.headers.items() if k in REQUEST_HEADERS}
    if request.client is not None:
        headers["x-forwarded-for"] = request.client.host
    try:
        return await http.request(
            request.method,
            node.address + (path or request.url.path),
            params=request.query_params,
            content=await request.body() if body is None else body,
            headers=headers,
        )
    except ClientDisconnect:  # the client left mid-body, or was answered 413 by the body limit
        raise ApiError(400, "bad_request", "the client left before its request body was in") from None
    except httpx.TransportError as exc:
        node.poke.set()  # a node that stopped answering is checked at once
        reason = exc.__class__.__name__
        raise ApiError(502, "node_unreachable", f"the session's node did not answer: {reason}") from None


def relayed(upstream: httpx.Response) -> Response:
    """The node's answer, as the gateway's."""
    response = Response(upstream.content, status_code=upstream.status_code)
    for key, value in upstream.headers.multi_items():
        if key in RESPONSE_HEADERS:
            response.headers.append(key, value)
    return response
