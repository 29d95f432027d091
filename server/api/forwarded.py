"""Whose request it is, behind a cluster's gateway: ``X-Forwarded-For`` trusted from the gateway only.

Per-client limits key on the client's address, so an address a client can choose would let it
escape them. An avatar node's app is reached through the gateway, which names the client in
``X-Forwarded-For`` and proves itself with a secret header (:data:`GATEWAY_HEADER`, a random value
the gateway hands its nodes); a request without that secret (a client reaching a node's port
directly) counts against its own address, whatever it claims.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

GATEWAY_HEADER = "x-avatar-gateway"


class GatewayForwarded:
    """ASGI middleware: the request's client becomes the first ``X-Forwarded-For`` address when the
    request carries the gateway's secret (``secret()``; None: no gateway, nothing is trusted)."""

    def __init__(self, app: Any, secret: Callable[[], str | None]) -> None:
        self.app = app
        self.secret = secret

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] in ("http", "websocket"):
            expected = self.secret()
            headers = dict(scope["headers"])
            proof = headers.get(GATEWAY_HEADER.encode())
            forwarded = headers.get(b"x-forwarded-for")
            if expected and proof is not None and forwarded and secrets.compare_digest(proof, expected.encode()):
                client = forwarded.decode("latin-1").split(",")[0].strip()
                scope = {**scope, "client": (client, 0)}
        await self.app(scope, receive, send)
