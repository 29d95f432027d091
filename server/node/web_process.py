"""One web process of a node: the whole app (API, control sockets, WebRTC, playout) on a loopback
port of its own, its sessions' frames from the node's shared engine workers."""

from __future__ import annotations

import logging

import uvicorn

from server.api.process import prepare_process
from server.api.serving import serving_app
from server.api.uvicorn_config import server_config
from server.config import Settings

# The host addresses a web process offers as ICE candidates; None: aioice's own (every interface).
# One machine's tests offer loopback only, as the node process itself does then.
HOST_ADDRESSES: list[str] | None = None


def run(settings: Settings, name: str, secret: str, log_level: str, host_addresses: list[str] | None) -> None:
    """The process's body (a spawned subprocess): serve until the node stops it."""
    prepare_process(settings.network, host_addresses)
    logging.basicConfig(level=log_level.upper(), format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s")
    app = serving_app(settings)
    app.state.gateway_secret = secret  # the front's requests: reports, and X-Forwarded-For trusted
    app.state.node_name = name
    uvicorn.Server(server_config(app, settings, log_level)).run()
