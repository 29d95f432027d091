"""Request bodies bounded by what arrives, not by what the client declares.

A declared ``Content-Length`` over a route's limit is refused at once; a body without one
(chunked) is counted as its chunks arrive, and one chunk past the limit the client is answered
``413 body_too_large`` and the handler reading the body is told the client left (whatever it
answers is dropped), so no handler, form parser or JSON decoder ever holds more than the limit of
one request. Pure ASGI: it wraps the ``receive`` channel every reader goes through.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.api.clip_upload import FORM_OVERHEAD
from server.api.local_adapter import MAX_VIDEO_BYTES
from server.base.errors import ApiError
from server.config import InputLimits


def route_limit(limits: InputLimits, path: str) -> int:
    """The largest request body a route takes: a clip (perhaps in a multipart form), an image in a
    JSON body (base64) or raw (a photo's framing checked), else an SDP offer or a small JSON body."""
    if path == "/v1/avatars":
        return MAX_VIDEO_BYTES + FORM_OVERHEAD
    if path == "/v1/sessions":
        return limits.max_image_bytes * 4 // 3 + 4096
    if path == "/v1/photos/framing":
        return limits.max_image_bytes
    return limits.max_sdp_bytes + 4096


def too_large(limit: int) -> ApiError:
    return ApiError(413, "body_too_large", f"request body over {limit} bytes")


class BodyLimit:
    """ASGI middleware: each HTTP request's body within ``limit_for(path)`` bytes (an app's and a
    front's: :func:`route_limit` of their input limits)."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _refuse(send, too_large(limit))
            return
        received, started, refused = 0, False, False

        async def counted() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = True
                    if not started:
                        await _refuse(send, too_large(limit))
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message: Message) -> None:
            nonlocal started
            if refused and not started:
                return  # the client has its 413: the handler's own answer goes nowhere
            started = True
            await send(message)

        await self.app(scope, counted, guarded)


async def _refuse(send: Send, error: ApiError) -> None:
    body = json.dumps({"error": {"code": error.code, "message": error.message}}).encode()
    # No "connection: close": the server reads on and drops the rest of the body (within the body
    # deadline), so the client, still sending, reads this answer instead of a reset connection.
    await send({"type": "http.response.start", "status": error.status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
