"""How the app runs on uvicorn: the settings each uvicorn option comes from."""

from __future__ import annotations

from server.api.uvicorn_config import server_config, transport_limit
from server.api.ws_keepalive import PatientKeepalive
from server.config import Settings


def test_uvicorn_takes_the_limits_and_deadlines_from_the_settings():
    settings = Settings(max_control_bytes=5000, ws_ping_interval_s=7.0, shutdown_grace_s=2.5, port=8123)
    config = server_config(object(), settings, "warning")
    assert config.ws_max_size == transport_limit(settings.limits) == 10_000
    assert config.ws_ping_interval == 7.0 and config.ws is PatientKeepalive
    assert config.timeout_graceful_shutdown == 2.5  # a flooding client's backlog cannot hold a shutdown
    assert config.port == 8123 and not config.proxy_headers
    assert server_config(object(), settings, "warning", port=0).port == 0  # extra options win
