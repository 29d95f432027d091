"""The cluster's one HTTP front (``avatar serve --ray ADDRESS``): places sessions, carries signalling.

The front (:mod:`server.front.app`) over the cluster's avatar nodes: the Ray nodes offering the
``avatar`` resource, each running a whole node app in an actor (:mod:`server.cluster.node`). A
created session's answer carries ``node`` (its Ray node id); ``GET /v1/cluster`` lists the nodes.
The process must have joined the Ray cluster first (:func:`server.cluster.join.join`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import ray
from fastapi import FastAPI

from server.cluster.membership import Membership
from server.cluster.node_settings import passed_to_nodes
from server.config import Settings
from server.front.app import create_front
from server.front.metrics import GatewayMetrics


def create_gateway(settings: Settings | None = None, loopback_ice: bool = False, poll_s: float = 0.5,
                   report_s: float = 1.0) -> FastAPI:
    """The gateway app. ``settings`` travel to every node (:mod:`server.cluster.node_settings`);
    ``loopback_ice`` makes the nodes offer only 127.0.0.1 as their ICE host candidate (one machine's tests)."""
    settings = settings or Settings.from_env()
    metrics = GatewayMetrics()
    membership = Membership(passed_to_nodes(settings), loopback_ice, poll_s, report_s,
                            on_lost=lambda node, reason: metrics.nodes_lost.inc())

    @contextlib.asynccontextmanager
    async def joined(app: FastAPI) -> AsyncIterator[None]:
        if not ray.is_initialized():
            raise RuntimeError("the gateway runs in a process that joined a Ray cluster (server.cluster.join)")
        yield

    app = create_front(membership, metrics, settings.access, settings.limits, settings.timing.offer_timeout_s,
                       title="avatar-engine gateway", around=joined,
                       description="Places avatar sessions on the nodes of a Ray cluster; signalling and control.",
                       none_serving="no avatar node serves: no Ray node offers the `avatar` resource yet")

    @app.get("/v1/cluster", tags=["ops"])
    async def cluster() -> dict:
        return {"nodes": [n.json() for n in membership.listing()]}

    return app
