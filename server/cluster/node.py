"""One avatar node: a whole ``avatar serve`` app (engine workers and WebRTC endpoint) in a Ray actor:
with ``web_processes`` > 1, the node's front over its web processes, as ``avatar serve`` runs it.

The gateway starts one on every Ray node that offers the ``avatar`` resource. It is detached and
named after its Ray node, so it outlives the gateway that started it and a restarted gateway finds
it (and its sessions) again. Its app listens on the node's own address at a free port: browsers'
media goes straight to it, the gateway relays only signalling and control. The actor's methods run
on the same event loop as the app, so a report reads the app's state without locks.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import ray
import uvicorn
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from server.api.report import NodeReport
from server.cluster.node_settings import node_settings

NAMESPACE = "avatar"
RESOURCE = "avatar"


def actor_name(node_id: str) -> str:
    return f"avatar-node-{node_id}"


def spawn(node_id: str, gpus: float, passed: dict[str, Any], loopback_ice: bool = False):
    """The node actor of Ray node ``node_id`` (the existing one if a gateway started it before).

    It holds one unit of ``avatar`` (one actor per node) and all the node's GPUs: Ray hides the
    devices an actor did not ask for."""
    options = {
        "name": actor_name(node_id),
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "num_gpus": gpus,
        "resources": {RESOURCE: 1},
        "max_restarts": 0,
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False),
    }
    return ray.remote(AvatarNode).options(**options).remote(passed, loopback_ice)


class AvatarNode:
    """The actor's body; ``start`` brings the app up (once), ``report`` says how it is doing."""

    def __init__(self, passed: dict[str, Any], loopback_ice: bool = False) -> None:
        self._passed = passed
        self._loopback_ice = loopback_ice
        self._node_id = ray.get_runtime_context().get_node_id()
        self._starting: asyncio.Task | None = None
        self._server: asyncio.Task | None = None
        self._app: Any = None
        self._address = ""
        self._secret: str | None = None

    async def start(self, gateway_secret: str | None = None) -> str:
        """Start the app if it is not running yet; its address. Idempotent: a restarted gateway calls
        it too, with its own secret (requests that carry it may name their client in X-Forwarded-For)."""
        self._secret = gateway_secret
        if self._app is not None:
            self._app.state.gateway_secret = gateway_secret
        if self._starting is None:
            self._starting = asyncio.create_task(self._serve())
        return await asyncio.shield(self._starting)

    async def _serve(self) -> str:
        from server.api.process import prepare_process
        from server.api.serving import serving_app  # the engine's imports: only where a node runs
        from server.api.uvicorn_config import server_config
        from server.node import web_process
        from server.node.front import create_node_front

        ip = ray.util.get_node_ip_address()
        settings = node_settings(self._passed, os.environ, ip)
        settings.check_bind()
        prepare_process(settings.network, ["127.0.0.1"] if self._loopback_ice else None)
        if self._loopback_ice:
            web_process.HOST_ADDRESSES = ["127.0.0.1"]
        # The same layout as ``avatar serve``: several web processes behind the node's own front.
        app = create_node_front(settings) if settings.node.web_processes > 1 else serving_app(settings)
        # Requests come through the gateway: the client they count against (per-client limits) is
        # the one it names in X-Forwarded-For, trusted only with the gateway's secret (a client
        # reaching this port directly counts as itself). With a token required, limits key on the token.
        app.state.gateway_secret = self._secret
        server = uvicorn.Server(server_config(app, settings, "warning"))
        self._server = asyncio.create_task(_serve_until_exit(server), name="avatar-node-server")
        while not server.started:
            if self._server.done():
                raise RuntimeError(f"the node's server did not start: {_ended(self._server)}")
            await asyncio.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        self._app = app
        self._address = f"http://{ip}:{port}"
        return self._address

    async def report(self) -> NodeReport:
        if self._app is None:
            raise RuntimeError("the node has not started")
        if self._server is not None and self._server.done():
            raise RuntimeError(f"the node's server stopped: {_ended(self._server)}")
        return self._app.state.report(self._node_id, self._address)


async def _serve_until_exit(server: uvicorn.Server) -> None:
    """uvicorn leaves with ``SystemExit`` when its start-up fails; in a task that would stop the
    actor's event loop, so it becomes an ordinary error."""
    try:
        await server.serve()
    except SystemExit as exc:
        raise RuntimeError(f"the server exited with status {exc.code} (see the node's log)") from None


def _ended(task: asyncio.Task) -> str:
    if task.cancelled():
        return "it was cancelled"
    exc = task.exception()
    return f"{exc.__class__.__name__}: {exc}" if exc is not None else "it returned"
