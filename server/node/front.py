"""The node's front (``avatar serve --web-processes N``): the front (:mod:`server.front.app`) over
the node's web processes, and the node-wide figures only it can give.

``GET /v1/engine`` shows the node's engine workers as the node owns them (every web process's
sessions, their batches, capacity per render kind) and the web processes with their sessions and
free capacity; ``/metrics`` merges the front's and every web process's figures.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI

from server.api.ops import real_time_by_render, worker_json
from server.api.report import NodeReport
from server.config import Settings
from server.front.app import create_front
from server.front.metrics import GatewayMetrics
from server.front.placement import spread
from server.node.members import WebProcesses
from server.node.metrics import merged_metrics
from server.node.supervisor import NodeSupervisor

METRICS_TIMEOUT_S = 2.0


def create_node_front(settings: Settings, log_level: str = "warning") -> FastAPI:
    members = WebProcesses()
    supervisor = NodeSupervisor(settings, members, log_level)
    metrics = GatewayMetrics()

    @contextlib.asynccontextmanager
    async def node_running(app: FastAPI) -> AsyncIterator[None]:
        await supervisor.start()
        try:
            yield
        finally:
            await supervisor.stop()

    async def web_metrics() -> dict[str, str]:
        async with httpx.AsyncClient(timeout=METRICS_TIMEOUT_S) as http:
            serving = [b for b in members.listing() if b.alive]
            answers = await asyncio.gather(*(http.get(b.address + "/metrics") for b in serving),
                                           return_exceptions=True)
        return {b.node: a.text for b, a in zip(serving, answers, strict=True)
                if isinstance(a, httpx.Response) and a.status_code == 200}

    async def node_metrics() -> bytes:
        metrics.observe(members.listing())
        return merged_metrics({"front": metrics.render().decode(), **await web_metrics()})

    def node_capacity(serving: list) -> int:
        """The web processes' room, within the shared engine's."""
        engine = supervisor.pool.capacity() if supervisor.pool is not None else 0
        return min(engine, sum(b.capacity for b in serving))

    app = create_front(members, metrics, settings.access, settings.limits, settings.timing.offer_timeout_s,
                       title="avatar-engine node", around=node_running,
                       description="One machine's web processes behind one front, sharing its engine workers.",
                       backends="web_processes", none_serving="no web process of this node serves yet",
                       render_metrics=node_metrics, capacity=node_capacity, rank=spread)
    app.state.supervisor = supervisor

    def report(node: str, address: str) -> NodeReport:
        """The whole node as one app (a Ray cluster's node actor runs this front)."""
        serving = [b for b in members.listing() if b.alive]
        workers = supervisor.pool.workers() if supervisor.pool is not None else []
        return NodeReport(node=node, address=address, sessions=tuple(s for b in serving for s in b.sessions),
                          capacity=node_capacity(serving), misses=sum(b.misses for b in serving),
                          workers_alive=sum(1 for w in workers if w.alive) if serving else 0)

    app.state.report = report

    @app.get("/v1/engine", tags=["ops"])
    async def engine() -> dict:
        workers = supervisor.pool.workers() if supervisor.pool is not None else []
        return {"workers": [worker_json(w) for w in workers], "real_time_by_render": real_time_by_render(workers),
                "web_processes": [{**b.json(), "pid": supervisor.pid(b.node)} for b in members.listing()]}

    return app
