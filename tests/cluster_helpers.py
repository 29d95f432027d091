"""A Ray cluster of several nodes on this machine (``ray.cluster_utils.Cluster``) and a gateway on it.

Ray turns an address of 127.0.0.1 into the machine's outward address; any other loopback address
is left as it is, so the cluster lives on 127.0.0.2 and no traffic leaves the loopback range.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import ray
import websockets
from ray.cluster_utils import Cluster
from server_helpers import Received, Running, collect, connect_client, serving

from server.base.protocol import control_subprotocols
from server.cluster.gateway import create_gateway
from server.config import Settings

LOOPBACK = "127.0.0.2"
FPS = 25


def cluster_settings(**overrides) -> Settings:
    """What the gateway hands its nodes here: the puppet engine on one thread, a playout cushion
    against three machines' worth of processes sharing two cores, unconnected sessions kept a while,
    and room counted by ``max_sessions`` alone (three nodes' live estimates on two shared cores would
    refuse sessions at random)."""
    return Settings.model_validate({
        "config": "puppet", "tts": "espeak", "warm_up": False, "engine_threads": 1, "playout_delay_s": 0.3,
        "engine_capacity_margin": -1.0,
        "playout_min_delay_s": 0.25, "offer_timeout_s": 60.0, "peer_timeout_s": 5.0, **overrides,
    })


@dataclass
class LocalCluster:
    """A head node without the ``avatar`` resource, and avatar nodes added and removed at will."""

    cluster: Cluster
    nodes: dict[str, object] = field(default_factory=dict)  # Ray node id -> its ray._private.node.Node
    started_s: float = 0.0

    @property
    def address(self) -> str:
        return self.cluster.address

    def add_avatar_node(self) -> str:
        node = self.cluster.add_node(num_cpus=1, resources={"avatar": 1}, node_ip_address=LOOPBACK)
        self.nodes[node.node_id] = node
        return node.node_id

    def remove(self, node_id: str) -> None:
        """The node's processes killed at once, as when a machine dies. They are niced first: here
        their teardown would take the surviving nodes' CPU, which a machine dying elsewhere never does."""
        node = self.nodes.pop(node_id)
        for pid in _descendants([p.process.pid for infos in node.all_processes.values() for p in infos]):
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, pid, 19)
        self.cluster.remove_node(node, allow_graceful=False)


def _descendants(roots: list[int]) -> set[int]:
    """``roots`` and every process below them, from /proc."""
    parent: dict[int, int] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as stat:
            parent[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
    found = set(roots)
    while more := {pid for pid, ppid in parent.items() if ppid in found} - found:
        found |= more
    return found


@contextlib.contextmanager
def local_cluster(avatar_nodes: int = 0) -> Iterator[LocalCluster]:
    """The cluster, with this process as a driver connected to it; everything stops at the end."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # Ray's head would report usage to the internet
    t0 = time.perf_counter()
    head = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                         "node_ip_address": LOOPBACK})
    local = LocalCluster(head)
    try:
        for _ in range(avatar_nodes):
            local.add_avatar_node()
        ray.init(address=head.address, logging_level="warning", log_to_driver=False)
        local.started_s = time.perf_counter() - t0
        yield local
    finally:
        ray.shutdown()
        head.shutdown()


@contextlib.asynccontextmanager
async def running_gateway(settings: Settings) -> AsyncIterator[Running]:
    """The gateway app on uvicorn in this process; its nodes offer only 127.0.0.1 to ICE."""
    async with serving(create_gateway(settings, loopback_ice=True, poll_s=0.25), settings) as running:
        yield running


async def serving_nodes(gateway: Running, count: int, timeout_s: float = 120.0) -> list[dict]:
    """``GET /v1/cluster``'s nodes once ``count`` of them serve (and no other is listed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        nodes = (await gateway.http.get("/v1/cluster")).json()["nodes"]
        if len(nodes) == count and all(n["alive"] for n in nodes):
            return nodes
        if time.monotonic() > deadline:
            raise TimeoutError(f"wanted {count} serving nodes, have {nodes}")
        await asyncio.sleep(0.1)


@dataclass
class Client:
    """One session seen by a client of the gateway: its peer, video frames and control events."""

    session: dict
    pc: object = None
    video: Received = field(default_factory=lambda: Received("video"))
    events: list[tuple[float, dict]] = field(default_factory=list)
    ws: object = None
    created_at: float = 0.0
    _tasks: list[asyncio.Task] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.session["session_id"]

    @property
    def node(self) -> str:
        return self.session["node"]

    def frames_between(self, t0: float, t1: float) -> int:
        return sum(1 for t in self.video.arrival if t0 <= t < t1)

    def errors(self) -> list[dict]:
        return [e for _, e in self.events if e["type"] == "error"]

    async def watch(self, srv: Running) -> None:
        """Offer through ``srv``, read the video track and open the control socket."""
        self.pc = await connect_client(srv, self.session, None)
        track = next(r.track for r in self.pc.getReceivers() if r.track.kind == "video")
        self._tasks.append(asyncio.create_task(collect(track, self.video, asyncio.Event())))
        await self.attach(srv)

    async def attach(self, srv: Running) -> None:
        self.ws = await websockets.connect(f"{srv.ws_url}/v1/sessions/{self.id}/control",
                                           subprotocols=control_subprotocols(self.session["token"]))
        self._tasks.append(asyncio.create_task(self._read(self.ws)))

    async def _read(self, ws) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for raw in ws:
                self.events.append((time.monotonic(), json.loads(raw)))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.ws is not None:
            await self.ws.close()
        if self.pc is not None:
            await self.pc.close()


async def create(srv: Running) -> Client:
    t0 = time.monotonic()
    res = await srv.http.post("/v1/sessions", json={})
    assert res.status_code == 201, res.text
    client = Client(res.json())
    client.created_at = t0
    return client


async def first_frame_s(client: Client, timeout_s: float = 20.0) -> float:
    deadline = time.monotonic() + timeout_s
    while not client.video.arrival:
        assert time.monotonic() < deadline, "no video frame arrived"
        await asyncio.sleep(0.01)
    return client.video.arrival[0] - client.created_at


async def ended(srv: Running, *clients: Client) -> None:
    for c in clients:
        await c.close()
        await srv.http.delete(f"/v1/sessions/{c.id}", headers={"Authorization": f"Bearer {c.session['token']}"})
