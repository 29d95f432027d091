"""A local Ray cluster of avatar nodes behind the gateway: start-up, first frame, node loss, capacity.

Starts a cluster on this machine (a head node and ``--nodes`` avatar nodes of one CPU each, on
127.0.0.2) and the gateway in this process, then measures: the cluster's start and the time until
every node serves; session create -> first video frame at an aiortc client, through the gateway and
straight to a node's own app (a single server with the same settings); sessions per node at capacity
(sessions created through the gateway, with no cap, until it answers 503); node loss -> ``node_lost``
on the control socket of a session on the node removed.

    python bench/cluster.py [--config puppet|tiny] [--nodes 2] [--trials 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the project before tests/engine, a folder of the same name

import aioice.ice  # noqa: E402
import httpx  # noqa: E402
from cluster_helpers import (  # noqa: E402
    cluster_settings,
    create,
    ended,
    first_frame_s,
    local_cluster,
    running_gateway,
    serving_nodes,
)
from server_helpers import Running  # noqa: E402


async def first_frames(gw: Running, nodes: list[dict], trials: int) -> tuple[list[float], list[float]]:
    """Each trial: a session through the gateway, then one straight to the node with the most room."""
    via, direct = [], []
    roomiest = max(nodes, key=lambda n: n["capacity"])["address"]
    async with httpx.AsyncClient(base_url=roomiest, timeout=30) as http:
        node = Running(roomiest, None, http)
        for _ in range(trials):
            for srv, into in ((gw, via), (node, direct)):
                client = await create(srv)
                await client.watch(srv)
                into.append(await first_frame_s(client, 60.0))
                await ended(srv, client)
                await asyncio.sleep(1.5)  # the gateway's map hears of the deletion
    return via, direct


async def capacity(gw: Running) -> dict[str, int]:
    held, per_node = [], {}
    while True:
        res = await gw.http.post("/v1/sessions", json={})
        if res.status_code != 201:
            print(f"  refused: {res.status_code} {res.json()['error']['code']}")
            break
        held.append(res.json())
        per_node[held[-1]["node"]] = per_node.get(held[-1]["node"], 0) + 1
    for s in held:
        await gw.http.delete(f"/v1/sessions/{s['session_id']}", headers={"Authorization": f"Bearer {s['token']}"})
    return per_node


async def node_loss(gw: Running, cluster) -> float:
    client = await create(gw)
    await client.watch(gw)
    await first_frame_s(client, 60.0)
    removed = time.monotonic()
    await asyncio.to_thread(cluster.remove, client.node)
    while not client.errors():
        await asyncio.sleep(0.01)
    lost = next(t for t, e in client.events if e["type"] == "error")
    await client.close()
    return lost - removed


async def run(args: argparse.Namespace) -> None:
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]
    # One client creates every session here: the per-client limits would stop it long before capacity.
    settings = cluster_settings(config=args.config, engine_threads=args.threads, client_max_unoffered=1000,
                                client_sessions_per_minute=1000)
    with local_cluster(args.nodes) as cluster:
        print(f"cluster start (head + {args.nodes} nodes): {cluster.started_s:.1f} s")
        async with running_gateway(settings) as gw:
            t0 = time.monotonic()
            nodes = await serving_nodes(gw, args.nodes, timeout_s=600)
            print(f"every node serving {time.monotonic() - t0:.1f} s later (engine loaded, capacity measured): "
                  f"free capacity {[n['capacity'] for n in nodes]}")
            via, direct = await first_frames(gw, nodes, args.trials)
            print(f"create -> first frame, median of {args.trials}: through the gateway "
                  f"{statistics.median(via):.2f} s {[round(v, 2) for v in via]}, single server "
                  f"{statistics.median(direct):.2f} s {[round(v, 2) for v in direct]}")
            await asyncio.sleep(1.5)
            per_node = await capacity(gw)
            print(f"sessions per node at capacity: {sorted(per_node.values())} ({args.config}, "
                  f"{args.threads} engine thread(s) per node, {args.nodes} nodes on this machine)")
            await asyncio.sleep(2.0)
            print(f"node loss -> node_lost: {await node_loss(gw, cluster):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="puppet")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--trials", type=int, default=3)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
