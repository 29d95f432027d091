"""A Ray avatar node laid out as ``avatar serve --web-processes 2`` lays out one machine: the node
actor runs the node's front over two web processes sharing its engine worker, and the gateway's
sessions on that node stream from either."""

from __future__ import annotations

import asyncio
import time

import httpx
from cluster_helpers import (
    FPS,
    cluster_settings,
    create,
    ended,
    first_frame_s,
    local_cluster,
    running_gateway,
    serving_nodes,
)
from server_helpers import loopback_only, wait_until


async def test_a_cluster_node_runs_its_web_processes_behind_its_own_front(monkeypatch):
    loopback_only(monkeypatch)
    with local_cluster(avatar_nodes=1):
        async with running_gateway(cluster_settings(web_processes=2, max_sessions=4, engine_settle_s=0.0)) as gw:
            (node,) = await serving_nodes(gw, 1)
            async with httpx.AsyncClient(base_url=node["address"], timeout=20) as http:
                engine = (await http.get("/v1/engine")).json()
            assert [w["node"] for w in engine["web_processes"]] == ["web-0", "web-1"] and len(engine["workers"]) == 1
            async with httpx.AsyncClient(base_url=node["address"], timeout=20) as http:
                listing: list = []

                async def each_with_room() -> bool:  # both processes report the worker's room
                    listing[:] = (await http.get("/v1/engine")).json()["web_processes"]
                    return all(w["capacity"] > 0 for w in listing)

                assert await wait_until(each_with_room, 10.0, interval_s=0.1), listing
            a, b = await create(gw), await create(gw)
            try:
                await a.watch(gw)
                await b.watch(gw)
                await asyncio.gather(first_frame_s(a), first_frame_s(b))
                async with httpx.AsyncClient(base_url=node["address"], timeout=20) as http:
                    seen: dict = {}

                    async def both_counted() -> bool:  # the worker reports every half second
                        seen.update((await http.get("/v1/engine")).json())
                        return seen["workers"][0]["sessions"] == 2

                    assert await wait_until(both_counted, 5.0, interval_s=0.1), seen["workers"]
                assert {w["node"]: w["sessions"] for w in seen["web_processes"]} == {"web-0": 1, "web-1": 1}
                t1 = time.monotonic()
                assert await wait_until(lambda: all(c.frames_between(t1, t1 + 2.0) >= 0.85 * FPS * 2.0 for c in (a, b)),
                                        3.0), [c.video.arrival[-5:] for c in (a, b)]
                assert a.errors() == [] and b.errors() == []
            finally:
                await ended(gw, a, b)
