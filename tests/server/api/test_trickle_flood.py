"""Trickle ICE from a hostile WHEP client: fragments flooding a resource with candidates, candidates
with impossible ports, endless fragments. Each is refused at once with a clear 4xx, what is within
the bounds still works, and a witness session on the same server keeps its frame rate."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from server_helpers import admitted_session, loopback_only, make_settings, running_server
from whip_helpers import SDP, bearer
from witness_helpers import ROOM, attacker, witness

pytestmark = pytest.mark.usefixtures("one_thread")
FRAGMENT = {"Content-Type": "application/trickle-ice-sdpfrag"}


# 20 fragments of 500 candidates each, PATCHed one after another; prints [[status, code], ...].
FLOOD = """
import json, sys, httpx
headers = {"Content-Type": "application/trickle-ice-sdpfrag", "Authorization": "Bearer " + sys.argv[2]}
answers = []
with httpx.Client(timeout=120) as http:
    for f in range(20):
        flood = "".join(f"a=candidate:{f * 500 + i} 1 udp 2122260223 127.0.0.1 {1024 + f * 500 + i} typ host\\r\\n"
                        for i in range(500))
        res = http.patch(sys.argv[1], content=flood, headers=headers)
        answers.append([res.status_code, res.json()["error"]["code"] if res.content else None])
print(json.dumps(answers))
"""


def candidate(i: int, port: int | None = None) -> str:
    return f"a=candidate:{i} 1 udp 2122260223 127.0.0.1 {1024 + i if port is None else port} typ host\r\n"


async def bare_whep_resource(srv, session: dict) -> tuple[RTCPeerConnection, str]:
    """A WHEP viewer whose offer carries no candidates (as a browser's that trickles them); its resource."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio", direction="recvonly")
    pc.addTransceiver("video", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = "".join(line + "\r\n" for line in pc.localDescription.sdp.splitlines()
                  if not line.startswith(("a=candidate:", "a=end-of-candidates")))
    res = await srv.http.post(f"/v1/sessions/{session['session_id']}/whep", content=sdp,
                              headers={"Content-Type": SDP, **bearer(session["token"])})
    assert res.status_code == 201, res.text
    return pc, res.headers["location"]


async def test_a_candidate_flood_is_refused_and_a_witness_keeps_its_frame_rate(monkeypatch):
    loopback_only(monkeypatch)
    # The attacker's viewer never connects: its session must outlive the witness's start.
    settings = make_settings(max_sessions=2, connect_timeout_s=120.0, **ROOM)
    async with running_server(settings, config="puppet") as srv:
        session = await admitted_session(srv, {"mode": "agent"})
        pc, resource = await bare_whep_resource(srv, session)
        headers = {**FRAGMENT, **bearer(session["token"])}
        try:
            async with witness(srv) as seen:
                t0 = time.monotonic()
                async with attacker(FLOOD, srv.url + resource, session["token"]) as flooder:
                    answers = json.loads(await asyncio.wait_for(flooder.stdout.read(), 120))
                assert answers == [[413, "too_many_candidates"]] * 20, answers
                await asyncio.sleep(max(0.0, t0 + 5.0 - time.monotonic()))
                seen.assert_kept(t0)
            for port in (70000, -5, 0):
                res = await srv.http.patch(resource, content=candidate(1, port), headers=headers)
                assert res.status_code == 400 and res.json()["error"]["code"] == "bad_sdp_fragment", res.text
            # Within the bounds: two fragments of 32 fill the resource's 64; one more is refused.
            for f in range(2):
                ok = await srv.http.patch(resource, content="".join(candidate(32 * f + i) for i in range(32)),
                                          headers=headers)
                assert ok.status_code == 204, ok.text
            over = await srv.http.patch(resource, content=candidate(99), headers=headers)
            assert over.status_code == 413 and over.json()["error"]["code"] == "too_many_candidates"
        finally:
            await pc.close()


async def test_fragments_past_the_resources_bound_are_refused(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(make_settings(max_sessions=1, max_trickle_fragments=8), config="puppet") as srv:
        session = await admitted_session(srv, {"mode": "agent"})
        pc, resource = await bare_whep_resource(srv, session)
        headers = {**FRAGMENT, **bearer(session["token"])}
        try:
            codes = [(await srv.http.patch(resource, content="a=mid:0\r\n", headers=headers)).status_code
                     for _ in range(10)]
            assert codes == [204] * 8 + [429] * 2, codes
            res = await srv.http.patch(resource, content=candidate(1), headers=headers)
            assert res.json()["error"]["code"] == "too_many_fragments"
        finally:
            await pc.close()
