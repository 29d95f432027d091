"""Every error response as JSON ``{"error": {"code", "message"}}``, including those Starlette
writes itself as plain text (a malformed ``Range`` on the page or a static file, a refused CORS
preflight), so that clients parse one error shape whatever the endpoint."""

from __future__ import annotations

import http
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class JsonErrors:
    """ASGI middleware: a 4xx/5xx whose body is not JSON is re-sent as the API's error body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def wrapped(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                if message["status"] >= 400 and b"json" not in headers.get(b"content-type", b""):
                    start = message
                    return
            elif message["type"] == "http.response.body" and start is not None:
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    await _send_json(send, start, b"".join(chunks), scope["method"] == "HEAD")
                return
            await send(message)

        await self.app(scope, receive, wrapped)


async def _send_json(send: Send, start: Message, text: bytes, head: bool) -> None:
    status = start["status"]
    message = text.decode("utf-8", "replace").strip()[:200] or _phrase(status)
    body = json.dumps({"error": {"code": "http_error", "message": message}}).encode()
    kept = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-type", b"content-length")]
    headers = [*kept, (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"
