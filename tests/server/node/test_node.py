"""``avatar serve --web-processes 2`` as deployed: one front, two web processes, one engine
worker shared by both. Sessions are spread over the web processes and everything about a session
(offer, control socket, WHEP, DELETE) reaches the process that holds it; killing one web process
ends only its sessions (the engine frees them) while the other's keep playing; the node's
``/v1/engine``, ``/healthz`` and ``/metrics`` describe both processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import websockets
from aiortc import RTCConfiguration, RTCPeerConnection
from server_helpers import Received, collect, loopback_only, spawned_server, wait_until
from whip_helpers import whep_viewer

from server.client import offer_media

NODE = ("--web-processes", "2")
QUICK = {"AVATAR_ENGINE_SETTLE_S": "0", "AVATAR_WARM_UP": "false"}


async def created(srv) -> dict:
    res = await srv.http.post("/v1/sessions", json={})
    assert res.status_code == 201, res.text
    return res.json()


async def watched(srv, session: dict) -> tuple[RTCPeerConnection, Received, asyncio.Event, list[asyncio.Task]]:
    """A peer receiving the session's video (offered through the front)."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    video, stop, readers = Received("video"), asyncio.Event(), []
    pc.on("track", lambda track: readers.append(asyncio.create_task(collect(track, video, stop)))
          if track.kind == "video" else None)
    await offer_media(srv.http, session["session_id"], session["token"], pc)
    return pc, video, stop, readers


async def next_event(control, kind: str, limit: int = 50) -> dict:
    for _ in range(limit):
        event = json.loads(await asyncio.wait_for(control.recv(), 15))
        if event["type"] == kind:
            return event
    raise AssertionError(f"no {kind} event in {limit}")


def frames_between(video: Received, t0: float, t1: float) -> int:
    return sum(1 for t in video.arrival if t0 <= t < t1)


async def test_two_web_processes_share_the_engine_and_one_dying_costs_only_its_sessions(monkeypatch):
    loopback_only(monkeypatch)
    async with spawned_server("micro", threads=1, max_sessions=8, extra=NODE, env=QUICK) as srv:
        assert await _eventually(srv, lambda h: h["web_processes_alive"] == 2, 60)  # both have reported
        engine = (await srv.http.get("/v1/engine")).json()
        assert len(engine["workers"]) == 1 and [w["node"] for w in engine["web_processes"]] == ["web-0", "web-1"]
        a, b = await created(srv), await created(srv)
        assert {a["node"], b["node"]} == {"web-0", "web-1"}  # spread: the emptier process takes the next
        (pa, va, stop_a, ra), (pb, vb, stop_b, rb) = await watched(srv, a), await watched(srv, b)
        assert await wait_until(lambda: len(va.pts) >= 50 and len(vb.pts) >= 50, 30)

        async with websockets.connect(
            f"{srv.ws_url}/v1/sessions/{b['session_id']}/control?token={b['token']}"
        ) as control, whep_viewer(srv, a) as viewer:
            await control.send(json.dumps({"type": "ping", "id": 7}))
            pong = await next_event(control, "pong")
            assert pong.get("id") == 7, pong
            assert await wait_until(lambda: len(viewer.media.video) >= 25, 20)  # WHEP through the front

            engine = (await srv.http.get("/v1/engine")).json()
            assert engine["workers"][0]["sessions"] == 2
            assert {w["node"]: w["sessions"] for w in engine["web_processes"]} == {"web-0": 1, "web-1": 1}
            assert "shared_batches" in engine["workers"][0]
            metrics = (await srv.http.get("/metrics")).text
            assert 'avatar_sessions_created_total{process="web-0"} 1.0' in metrics
            assert 'avatar_sessions_created_total{process="web-1"} 1.0' in metrics

            pid = next(w["pid"] for w in engine["web_processes"] if w["node"] == b["node"])
            os.kill(pid, signal.SIGKILL)
            lost = await next_event(control, "error")
            assert lost["code"] == "node_lost", lost

        async def one_engine_session() -> bool:
            return (await srv.http.get("/v1/engine")).json()["workers"][0]["sessions"] == 1

        assert await wait_until(one_engine_session, 10, interval_s=0.2)  # the worker closed the dead one's session
        t1 = time.monotonic()
        assert await wait_until(lambda: frames_between(va, t1, t1 + 2.0) >= 40, 3.0)  # a's process still plays 25 fps
        assert (await srv.http.get(f"/v1/sessions/{b['session_id']}/trace")).status_code == 404

        auth = {"Authorization": f"Bearer {a['token']}"}
        assert (await srv.http.delete(f"/v1/sessions/{a['session_id']}", headers=auth)).status_code == 204
        health = (await srv.http.get("/healthz")).json()
        assert health["web_processes"] == 2
        for stop, readers, pc in ((stop_a, ra, pa), (stop_b, rb, pb)):
            stop.set()
            await pc.close()
            await asyncio.gather(*readers, return_exceptions=True)
        # The node starts a new web process in place of the one that died.
        assert await _eventually(srv, lambda h: h["web_processes_alive"] == 2, 60)


async def _eventually(srv, check, timeout_s: float) -> bool:
    """``check`` of the node's /healthz holds within ``timeout_s``; else what the node said, in the error."""

    async def holds() -> bool:
        return check((await srv.http.get("/healthz")).json())

    if await wait_until(holds, timeout_s, interval_s=0.5):
        return True
    health, engine = (await srv.http.get("/healthz")).json(), (await srv.http.get("/v1/engine")).json()
    raise AssertionError(f"not within {timeout_s} s: {health}; web processes {engine['web_processes']}")
