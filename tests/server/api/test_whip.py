"""WHIP ingest and WHEP egress with plain aiortc clients (``application/sdp`` over HTTP), on the puppet
engine: the published speech drives the avatar's mouth, every viewer gets video and voice, and each
status the RFCs ask for."""

from __future__ import annotations

import time

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from server_helpers import SpeechTrack, loopback_only, make_settings, running_server, speech_pcm16, wait_until
from whip_helpers import (
    MOUTH_FOLLOWS_VOICE_R,
    SDP,
    bearer,
    mouth_follows_voice,
    post_offer,
    whep_viewer,
    whip_publisher,
)

from server.api.whip import ice_links
from server.base.protocol import IceServer

pytestmark = pytest.mark.usefixtures("one_thread")
FRAGMENT = "application/trickle-ice-sdpfrag"


async def _session(srv, mode: str = "mirror") -> dict:
    res = await srv.http.post("/v1/sessions", json={"mode": mode})
    assert res.status_code == 201, res.text
    return res.json()


async def test_published_speech_drives_the_avatar_for_every_viewer(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(make_settings(), config="puppet") as srv:
        session = await _session(srv)
        sid = session["session_id"]
        live = srv.manager.sessions[sid]
        async with whip_publisher(srv, session, SpeechTrack(speech_pcm16(), loop=True)) as publisher, \
                whep_viewer(srv, session) as first, whep_viewer(srv, session) as second:
            assert publisher.location.startswith(f"/v1/sessions/{sid}/whip/")
            assert first.location != second.location and len(live.outbound.viewers) == 2
            t0 = time.monotonic()
            assert await wait_until(lambda: min(len(first.media.video), len(second.media.video)) >= 150, 40), (
                len(first.media.video), len(second.media.video))
            # The published audio is the session's microphone.
            assert live.inbound.microphone.samples > 16_000 and live.inbound.microphone.peak > 0.05
            for viewer in (first, second):
                assert {rgb.shape for _, _, rgb in viewer.media.video} == {(256, 256, 3)}
                assert viewer.media.loud_packets(since=t0) > 25  # the avatar's voice (mirror: the speech)
                r, lag = mouth_follows_voice(viewer.media, live.avatar, since=t0 + 1.0)
                assert r > MOUTH_FOLLOWS_VOICE_R, (r, lag)
            print(f"WHEP viewers: mouth openness vs voice loudness r = {r:.2f} at lag {lag} frames")

            # A viewer leaves; the other keeps getting frames; the publisher's DELETE ends the session.
            res = await srv.http.delete(first.location, headers=bearer(session["token"]))
            assert res.status_code == 200 and len(live.outbound.viewers) == 1
            seen = len(second.media.video)
            assert await wait_until(lambda: len(second.media.video) > seen + 25, 10)
            assert (await srv.http.delete(first.location, headers=bearer(session["token"]))).status_code == 404
            res = await srv.http.delete(publisher.location, headers=bearer(session["token"]))
            assert res.status_code == 200
            assert sid not in srv.manager.sessions


async def test_viewers_alone_watch_an_agent_session(monkeypatch):
    """No WHIP and no /offer: a WHEP viewer starts the media clock and keeps the session alive."""
    loopback_only(monkeypatch)
    async with running_server(make_settings(offer_timeout_s=1.0), config="puppet") as srv:
        session = await _session(srv, "agent")
        async with whep_viewer(srv, session) as viewer:
            assert await wait_until(lambda: len(viewer.media.video) >= 50 and len(viewer.media.audio) >= 100, 20)
            assert session["session_id"] in srv.manager.sessions  # past offer_timeout_s, still alive
        assert await wait_until(lambda: session["session_id"] not in srv.manager.sessions, 10)


async def test_whip_and_whep_error_statuses(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(make_settings(max_viewers=1), config="puppet") as srv:
        session = await _session(srv)
        sid, token = session["session_id"], session["token"]
        sdp_headers = {"Content-Type": SDP, **bearer(token)}
        for kind in ("whip", "whep"):
            url = f"/v1/sessions/{sid}/{kind}"
            wrong = await srv.http.post(url, content="v=0", headers={"Content-Type": SDP, **bearer("nope")})
            assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "bad_token"
            unknown = await srv.http.post(f"/v1/sessions/s_0000/{kind}", content="v=0", headers=sdp_headers)
            assert unknown.status_code == 404
            as_json = await srv.http.post(url, json={"sdp": "v=0", "type": "offer"}, headers=bearer(token))
            assert as_json.status_code == 415 and as_json.json()["error"]["code"] == "unsupported_media_type"
            get = await srv.http.get(url, headers=bearer(token))
            assert get.status_code == 405 and get.headers["allow"] == "POST"
            for method in ("PATCH", "DELETE"):
                missing = await srv.http.request(method, f"{url}/nope", headers={**bearer(token),
                                                                                 "Content-Type": FRAGMENT})
                assert missing.status_code == 404, (method, missing.text)
        # A bad WHEP offer costs only that viewer; a bad WHIP offer costs the session (its peer), as /offer does.
        garbage = await srv.http.post(f"/v1/sessions/{sid}/whep", content="not sdp at all", headers=sdp_headers)
        assert garbage.status_code == 400 and garbage.json()["error"]["code"] == "bad_sdp"
        assert sid in srv.manager.sessions

        async with whip_publisher(srv, session, SpeechTrack(speech_pcm16())) as publisher, \
                whep_viewer(srv, session) as viewer:
            again = _offering_peer()
            assert (await post_offer(srv, session, "whip", again)).status_code == 409  # one publisher per session
            assert (await post_offer(srv, session, "whep", again)).status_code == 503  # max_viewers = 1
            await again.close()
            for resource in (publisher.location, viewer.location):
                put = await srv.http.put(resource, headers=bearer(token))
                assert put.status_code == 405 and put.headers["allow"] == "PATCH, DELETE"
                frag = await srv.http.patch(resource, content="a=end-of-candidates\r\n", headers=bearer(token))
                assert frag.status_code == 415
                frag_headers = {"Content-Type": FRAGMENT, **bearer(token)}
                candidate = ("a=mid:0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 9 typ host\r\n"
                             "a=end-of-candidates\r\n")
                stale = await srv.http.patch(resource, content=candidate, headers={**frag_headers, "If-Match": '"x"'})
                assert stale.status_code == 412
                restart = await srv.http.patch(resource, content="a=ice-ufrag:new1\r\na=ice-pwd:" + "p" * 22 + "\r\n",
                                               headers=frag_headers)
                assert restart.status_code == 422 and restart.json()["error"]["code"] == "ice_restart_unsupported"
                bad = await srv.http.patch(resource, content="a=candidate:1 1 udp\r\n", headers=frag_headers)
                assert bad.status_code == 400
                trickled = await srv.http.patch(resource, content=candidate, headers=frag_headers)
                assert trickled.status_code == 204
            assert (await srv.http.delete(viewer.location, headers=bearer("nope"))).status_code == 401


def _offering_peer() -> RTCPeerConnection:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio", direction="sendrecv")
    pc.addTransceiver("video", direction="recvonly")
    return pc


async def test_link_headers_name_the_configured_ice_servers(monkeypatch):
    servers = [IceServer.parse("stun:127.0.0.1:9"), IceServer.parse("turn:alice:s3cret@127.0.0.1:9?transport=udp")]
    assert ice_links(servers) == [
        '<stun:127.0.0.1:9>; rel="ice-server"',
        '<turn:127.0.0.1:9?transport=udp>; rel="ice-server"; username="alice"; credential="s3cret"; '
        'credential-type="password"',
    ]
    loopback_only(monkeypatch)
    settings = make_settings(ice_servers=["stun:127.0.0.1:9"])
    async with running_server(settings, config="puppet") as srv:
        session = await _session(srv)
        res = await post_offer(srv, session, "whep", _offering_peer())
        assert res.status_code == 201 and res.headers["content-type"] == SDP
        assert res.headers.get_list("link") == ['<stun:127.0.0.1:9>; rel="ice-server"']
        assert res.headers["etag"].strip('"') == res.headers["location"].rsplit("/", 1)[1]
