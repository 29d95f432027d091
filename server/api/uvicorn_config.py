"""How an app runs on uvicorn: the same for ``avatar serve`` and for an avatar node of a cluster."""

from __future__ import annotations

from typing import Any

import uvicorn

from server.api.read_deadlines import protocol_class
from server.api.ws_keepalive import PatientKeepalive
from server.config import InputLimits, Settings


def transport_limit(limits: InputLimits) -> int:
    """The largest websocket message read at all: up to it a message over ``max_control_bytes`` is
    answered with ``message_too_large``, past it the socket is closed (1009, naming this limit)."""
    return 2 * limits.max_control_bytes


def server_config(app: Any, settings: Settings, log_level: str, **extra: Any) -> uvicorn.Config:
    """How ``avatar serve`` runs an app on uvicorn (an avatar node of a cluster runs the same);
    ``extra`` adds or overrides uvicorn options (tests: port 0)."""
    options: dict[str, Any] = {
        "host": settings.network.host,
        "port": settings.network.port,
        "log_level": log_level,
        "ws_max_size": transport_limit(settings.limits),
        "ws_ping_interval": settings.timing.ws_ping_interval_s,
        "ws_ping_timeout": settings.timing.ws_ping_timeout_s,
        # A busy client's pong waits behind its messages the server has not read yet: not a dead client.
        "ws": PatientKeepalive,
        # X-Forwarded-For decides whom the client limits count against, so it is trusted only when
        # asked: by the settings (a reverse proxy here) or by naming the forwarders (a cluster node).
        "proxy_headers": settings.access.proxy_headers or "forwarded_allow_ips" in extra,
        # A request's line, headers and body arrive within bounds, however slowly a client sends.
        "http": protocol_class(settings.timing.header_timeout_s, settings.timing.body_timeout_s),
        "timeout_graceful_shutdown": settings.timing.shutdown_grace_s,
    }
    return uvicorn.Config(app, **{**options, **extra})
