"""Mutated offers from live aiortc clients, through the HTTP API: each is ``400 bad_sdp`` or is
answered, and an answered one either connects or is reaped at the connect timeout; no background
task (aiortc's connect task included) fails, no session, task or peer is left behind."""

from __future__ import annotations

import asyncio
import collections
import functools

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from sdp_helpers import aiortc_offer, mutations
from server_helpers import admitted_session, loopback_only, make_settings, running_server, session_tasks, wait_until

from server.media.sdp import BadOffer, check_offer

BATCH = 2  # sessions at once: the engine admits what its measured capacity allows
CONNECT_TIMEOUT_S = 3.0
pytestmark = pytest.mark.usefixtures("one_thread")


def accepted_mutations(sdp: str, every: int) -> list[int]:
    """Which of the mutations the offer checks let through (the accepted-but-altered offers), thinned;
    by index, as every aiortc offer on loopback has the same lines."""
    kept = []
    for index, (_, mutated) in enumerate(mutations(sdp)):
        try:
            check_offer(mutated)
        except BadOffer:
            continue
        kept.append(index)
    return kept[::every]


async def offer_mutated(srv, index: int, outcomes: collections.Counter) -> tuple[int, RTCPeerConnection, dict]:
    session = await admitted_session(srv)
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    name, offer = list(mutations(await aiortc_offer(pc)))[index]
    res = await srv.http.post(f"/v1/sessions/{session['session_id']}/offer", json={"sdp": offer, "type": "offer"},
                              headers={"Authorization": f"Bearer {session['token']}"})
    assert res.status_code in (200, 400), (name, res.status_code, res.text)
    if res.status_code == 400:
        assert res.json()["error"]["code"] == "bad_sdp", res.text
        outcomes["refused"] += 1
        return index, pc, session
    try:
        await pc.setRemoteDescription(RTCSessionDescription(**res.json()))
    except Exception:  # the client may not like an answer to an offer it did not make
        outcomes["client refused the answer"] += 1
    return index, pc, session


def settled(srv, sessions: list[dict]) -> bool:
    """Each session has connected, or is gone (refused, or reaped at the connect timeout)."""
    live = srv.manager.sessions
    return all(s["session_id"] not in live or live[s["session_id"]].lifecycle.connected.is_set() for s in sessions)


async def test_mutated_live_offers_connect_or_are_reaped_and_leave_nothing_behind(monkeypatch):
    loopback_only(monkeypatch)
    errors: list[dict] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    settings = make_settings(max_sessions=BATCH, client_max_unoffered=BATCH, connect_timeout_s=CONNECT_TIMEOUT_S)
    outcomes: collections.Counter[str] = collections.Counter()
    names = accepted_mutations(await aiortc_offer(), every=8)
    assert len(names) >= 8
    async with running_server(settings, config="puppet") as srv:
        for start in range(0, len(names), BATCH):
            tried = await asyncio.gather(*(offer_mutated(srv, n, outcomes) for n in names[start : start + BATCH]))
            assert await wait_until(functools.partial(settled, srv, [s for _, _, s in tried]), CONNECT_TIMEOUT_S + 5), (
                "a session neither connected nor was reaped")
            for _, pc, session in tried:
                live = srv.manager.sessions.get(session["session_id"])
                outcomes["connected" if live is not None and live.lifecycle.connected.is_set() else "reaped"] += 1
                await pc.close()
                if live is not None:
                    await srv.manager.close(session["session_id"], "test_done")
            assert await wait_until(lambda: not srv.manager.sessions and not session_tasks(), 10)
        assert (await srv.http.get("/healthz")).status_code == 200
    await asyncio.sleep(0.1)
    assert not errors, [e.get("message") for e in errors]
    assert outcomes["connected"] and outcomes["connected"] + outcomes["reaped"] == len(names), outcomes


async def test_offers_that_crashed_aiortc_are_400_bad_sdp_through_the_api(monkeypatch):
    loopback_only(monkeypatch)
    base = await aiortc_offer()
    broken = {
        "a=fmtp without its a=rtpmap": base.replace("a=rtpmap:98 rtx/90000\r\n", ""),  # StopIteration: was a 500
        "NUL in a line": base.replace("a=mid:0", "a=mid:\0"),
        "unknown fingerprint algorithms": base.replace("sha-", "sha3-"),
        "BUNDLE naming a missing mid": base.replace("a=mid:1", "a=mid:7"),
        "no direction": base.replace("a=recvonly\r\n", ""),
    }
    assert all(sdp != base for sdp in broken.values())
    async with running_server(make_settings(max_sessions=2), config="puppet") as srv:
        for what, sdp in broken.items():
            session = await admitted_session(srv)
            res = await srv.http.post(f"/v1/sessions/{session['session_id']}/offer",
                                      json={"sdp": sdp, "type": "offer"},
                                      headers={"Authorization": f"Bearer {session['token']}"})
            assert res.status_code == 400 and res.json()["error"]["code"] == "bad_sdp", (what, res.text)
        assert await wait_until(lambda: not srv.manager.sessions and not session_tasks(), 10)
        assert (await srv.http.get("/healthz")).status_code == 200
