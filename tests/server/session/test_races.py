"""Limits that parallel requests must not race past: each is checked and recorded with no await in
between, so N requests fired at once get exactly as many admissions as the limit allows."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from server_helpers import LIVE_MARGIN, admitted_session, loopback_only, make_settings, running_server, wait_until
from whip_helpers import post_offer

pytestmark = pytest.mark.usefixtures("one_thread")


def viewer_peer() -> RTCPeerConnection:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio", direction="recvonly")
    pc.addTransceiver("video", direction="recvonly")
    return pc


async def test_parallel_whep_offers_get_exactly_the_viewer_limit(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(make_settings(max_viewers=4, max_sessions=1), config="puppet") as srv:
        session = await admitted_session(srv, {"mode": "agent"})
        pcs = [viewer_peer() for _ in range(12)]
        try:
            answers = await asyncio.gather(*(post_offer(srv, session, "whep", pc) for pc in pcs))
            codes = sorted(res.status_code for res in answers)
            assert codes == [201] * 4 + [503] * 8, codes
            assert {res.json()["error"]["code"] for res in answers if res.status_code == 503} == {"too_many_viewers"}
            assert len(srv.manager.sessions[session["session_id"]].outbound.viewers) == 4
        finally:
            await asyncio.gather(*(pc.close() for pc in pcs))


async def test_parallel_creations_get_exactly_max_sessions(monkeypatch):
    loopback_only(monkeypatch)
    settings = make_settings(max_sessions=2, client_max_unoffered=50, client_sessions_per_minute=100)
    async with running_server(settings, config="puppet") as srv:
        answers = await asyncio.gather(*(srv.http.post("/v1/sessions", json={}) for _ in range(15)))
        codes = sorted(res.status_code for res in answers)
        assert codes == [201] * 2 + [503] * 13, codes
        assert {res.json()["error"]["code"] for res in answers if res.status_code == 503} == {"at_capacity"}
        assert len(srv.manager.sessions) == 2


async def test_parallel_creations_never_exceed_the_engines_capacity(monkeypatch):
    loopback_only(monkeypatch)
    settings = make_settings(max_sessions=None, engine_capacity_margin=LIVE_MARGIN, client_max_unoffered=50,
                             client_sessions_per_minute=100)
    async with running_server(settings, config="puppet") as srv:
        capacity = (await srv.http.get("/healthz")).json()["capacity"]
        assert capacity >= 1
        for _ in range(3):
            answers = await asyncio.gather(*(srv.http.post("/v1/sessions", json={}) for _ in range(capacity + 4)))
            admitted = [res.json()["session_id"] for res in answers if res.status_code == 201]
            assert 1 <= len(admitted) <= capacity, (len(admitted), capacity)
            assert all(res.json()["error"]["code"] == "at_capacity" for res in answers if res.status_code != 201)
            await asyncio.gather(*(srv.manager.close(sid, "deleted") for sid in admitted))


async def test_a_session_whose_only_viewers_never_connect_is_reaped(monkeypatch):
    """Viewers' offers are answered and the answers never applied, a new one each second: the
    session (and its engine slot) goes once the connect timeout has passed since the first offer,
    as a page's that never connects does; offering again does not hold it."""
    loopback_only(monkeypatch)
    settings = make_settings(max_sessions=1, max_viewers=8, offer_timeout_s=1.0, connect_timeout_s=1.5)
    async with running_server(settings, config="puppet") as srv:
        session = await admitted_session(srv, {"mode": "agent"})
        closed = srv.manager.sessions[session["session_id"]]
        pcs = []
        try:
            t0 = time.monotonic()
            for _ in range(6):
                pcs.append(pc := viewer_peer())
                if (await post_offer(srv, session, "whep", pc)).status_code == 404:
                    break
                await asyncio.sleep(1.0)
            assert await wait_until(lambda: session["session_id"] not in srv.manager.sessions, 5)
            assert closed.close_reason == "connect_timeout"
            assert closed.lifecycle.closed.is_set() and time.monotonic() - t0 < 5.0
            await admitted_session(srv)  # its slot is free again
        finally:
            await asyncio.gather(*(pc.close() for pc in pcs))
