"""HTTP and control-socket API: every limit and every kind of bad input, one test each.

None of them may crash the server or leak a session: each test ends by checking the server
still answers and holds only the sessions it should.
"""

from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import pytest
import websockets
from server_helpers import connect_client, loopback_only, make_settings, running_server, wait_until

from server.cli import main as cli_main

pytestmark = pytest.mark.usefixtures("one_thread")


async def create(srv, **body) -> dict:
    res = await srv.http.post("/v1/sessions", json=body)
    assert res.status_code == 201, res.text
    return res.json()


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def assert_error(res, status: int, code: str) -> None:
    assert res.status_code == status, res.text
    assert res.headers["content-type"].startswith("application/json")
    body = res.json()
    assert body["error"]["code"] == code and body["error"]["message"]


async def control(srv, session: dict, token: str | None = None):
    return await websockets.connect(
        f"{srv.ws_url}/v1/sessions/{session['session_id']}/control?token={token or session['token']}"
    )


async def next_event(ws, kind: str, timeout_s: float = 5.0) -> dict:
    async def find() -> dict:
        while True:
            event = json.loads(await ws.recv())
            if event["type"] == kind:
                return event

    return await asyncio.wait_for(find(), timeout_s)


async def assert_healthy(srv, sessions: int) -> None:
    res = await srv.http.get("/healthz")
    assert res.status_code == 200 and res.json()["sessions"] == sessions


async def test_session_cap_returns_503_and_running_sessions_are_unaffected():
    async with running_server(make_settings(max_sessions=1)) as srv:
        first = await create(srv)
        res = await srv.http.post("/v1/sessions", json={})
        assert_error(res, 503, "at_capacity")
        assert res.headers["retry-after"]
        ws = await control(srv, first)  # the running session still works
        await ws.send(json.dumps({"type": "ping", "id": 1}))
        assert (await next_event(ws, "pong"))["id"] == 1
        await ws.close()
        assert (await srv.http.delete(f"/v1/sessions/{first['session_id']}", headers=bearer(first["token"]))
                ).status_code == 204
        await create(srv)  # room again
        await assert_healthy(srv, 1)


async def test_wrong_or_missing_session_token_is_401():
    async with running_server() as srv:
        s = await create(srv)
        offer = {"sdp": "v=0", "type": "offer"}
        assert_error(await srv.http.post(f"/v1/sessions/{s['session_id']}/offer", json=offer,
                                         headers=bearer("wrong")), 401, "bad_token")
        assert_error(await srv.http.post(f"/v1/sessions/{s['session_id']}/offer", json=offer), 401, "bad_token")
        assert_error(await srv.http.delete(f"/v1/sessions/{s['session_id']}", headers=bearer("wrong")),
                     401, "bad_token")
        ws = await control(srv, s, token="wrong")
        assert (await next_event(ws, "error"))["code"] == "bad_token"
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd.code == 4401
        await assert_healthy(srv, 1)


async def test_server_auth_token_guards_session_creation():
    turn = {"urls": ["turn:relay.example:3478"], "username": "u", "credential": "turn-pass"}
    async with running_server(make_settings(auth_token="s3cret", ice_servers=[turn])) as srv:
        assert_error(await srv.http.post("/v1/sessions", json={}), 401, "bad_token")
        assert_error(await srv.http.post("/v1/sessions", json={}, headers=bearer("nope")), 401, "bad_token")
        res = await srv.http.post("/v1/sessions", json={}, headers=bearer("s3cret"))
        assert res.status_code == 201
        assert res.json()["ice_servers"][0]["credential"] == "turn-pass"  # for the session's holder only
        info = await srv.http.get("/v1/info")
        assert info.json()["auth_required"] is True and info.json()["ice_server_count"] == 1
        assert "turn-pass" not in info.text and "relay.example" not in info.text


async def test_unknown_session_is_404():
    async with running_server() as srv:
        offer = {"sdp": "v=0", "type": "offer"}
        assert_error(await srv.http.post("/v1/sessions/s_nope/offer", json=offer, headers=bearer("x")),
                     404, "unknown_session")
        assert_error(await srv.http.delete("/v1/sessions/s_nope", headers=bearer("x")), 404, "unknown_session")
        ws = await control(srv, {"session_id": "s_nope", "token": "x"})
        assert (await next_event(ws, "error"))["code"] == "unknown_session"
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd.code == 4404
        assert_error(await srv.http.get("/v2/nothing"), 404, "http_error")


async def test_malformed_sdp_is_400_and_the_session_is_freed():
    async with running_server() as srv:
        s = await create(srv)
        res = await srv.http.post(f"/v1/sessions/{s['session_id']}/offer", headers=bearer(s["token"]),
                                  json={"sdp": "this is not SDP", "type": "offer"})
        assert_error(res, 400, "bad_sdp")
        assert await wait_until(lambda: not srv.manager.sessions, 5)
        s = await create(srv)
        audio_only = "\r\n".join([
            "v=0", "o=- 1 1 IN IP4 127.0.0.1", "s=-", "t=0 0", "a=group:BUNDLE 0",
            "m=audio 9 UDP/TLS/RTP/SAVPF 111", "c=IN IP4 0.0.0.0", "a=mid:0", "a=sendrecv",
            "a=ice-ufrag:abcd", "a=ice-pwd:abcdefghijklmnopqrstuvwx",
            "a=fingerprint:sha-256 " + ":".join(["AA"] * 32), "a=setup:actpass",
            "a=rtpmap:111 opus/48000/2", "a=rtcp-mux", "",
        ])
        res = await srv.http.post(f"/v1/sessions/{s['session_id']}/offer", headers=bearer(s["token"]),
                                  json={"sdp": audio_only, "type": "offer"})
        assert_error(res, 400, "bad_sdp")
        assert "video" in res.json()["error"]["message"]
        assert await wait_until(lambda: not srv.manager.sessions, 5)
        await assert_healthy(srv, 0)


async def test_oversized_sdp_and_body_are_rejected():
    async with running_server(make_settings(max_sdp_bytes=2048)) as srv:
        s = await create(srv)
        url = f"/v1/sessions/{s['session_id']}/offer"
        assert_error(await srv.http.post(url, headers=bearer(s["token"]), json={"sdp": "a" * 3000, "type": "offer"}),
                     413, "sdp_too_large")
        assert_error(await srv.http.post(url, headers=bearer(s["token"]), json={"sdp": "a" * 100_000,
                                                                                  "type": "offer"}),
                     413, "body_too_large")
        await assert_healthy(srv, 1)


async def test_malformed_json_body_is_400():
    async with running_server() as srv:
        res = await srv.http.post("/v1/sessions", content=b"{not json", headers={"content-type": "application/json"})
        assert_error(res, 400, "bad_request")
        assert_error(await srv.http.post("/v1/sessions", json={"mode": "karaoke"}), 400, "bad_request")
        assert_error(await srv.http.post("/v1/sessions", json={"surprise": 1}), 400, "bad_request")
        assert_error(await srv.http.post("/v1/sessions", json={"avatar": "nobody"}), 400, "bad_avatar")
        assert_error(await srv.http.post("/v1/sessions", json={"quality": "ultra"}), 400, "bad_quality")
        s = await create(srv)
        assert_error(await srv.http.post(f"/v1/sessions/{s['session_id']}/offer", headers=bearer(s["token"]),
                                         json={"sdp": "v=0"}), 400, "bad_request")
        await assert_healthy(srv, 1)


async def test_control_bad_json_and_bad_messages_get_error_events():
    async with running_server() as srv:
        ws = await control(srv, await create(srv, mode="agent"))
        cases = [("{oops", "bad_json"), (json.dumps({"type": "dance"}), "bad_message"),
                 (json.dumps({"type": "speak"}), "bad_message"), (json.dumps([1, 2]), "bad_message"),
                 (json.dumps({"type": "audio.append", "sample_rate": 16000, "audio": "%%%"}), "bad_message"),
                 (json.dumps({"type": "audio.commit"}), "empty_commit")]
        for raw, code in cases:
            await ws.send(raw)
            assert (await next_event(ws, "error"))["code"] == code, raw
        await ws.send(json.dumps({"type": "ping", "id": "still-open"}))
        assert (await next_event(ws, "pong"))["id"] == "still-open"


async def test_control_message_size_cap():
    async with running_server(make_settings(max_control_bytes=4096)) as srv:
        s = await create(srv, mode="agent")
        ws = await control(srv, s)
        await ws.send(json.dumps({"type": "speak", "text": "x" * 5000}))
        assert (await next_event(ws, "error"))["code"] == "message_too_large"
        await ws.send(json.dumps({"type": "audio.append", "sample_rate": 16000}))
        await ws.send(b"\0" * 6000)
        assert (await next_event(ws, "error"))["code"] == "message_too_large"
        await ws.send(b"\0" * 100_000)  # beyond the transport limit: the socket is closed, nothing else
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
        ws = await control(srv, s)  # the session is fine and takes a new control socket
        await ws.send(json.dumps({"type": "ping"}))
        await next_event(ws, "pong")
        await assert_healthy(srv, 1)


async def test_text_length_cap():
    async with running_server(make_settings(max_text_chars=100)) as srv:
        ws = await control(srv, await create(srv, mode="agent"))
        await ws.send(json.dumps({"type": "speak", "text": "la " * 50}))
        assert (await next_event(ws, "error"))["code"] == "text_too_long"


async def test_pushed_audio_backlog_cap():
    async with running_server(make_settings(max_audio_backlog_s=1.0)) as srv:
        s = await create(srv, mode="agent")
        ws = await control(srv, s)
        pcm = np.zeros(8000, "<i2").tobytes()  # 0.5 s at 16 kHz
        for _ in range(2):
            await ws.send(json.dumps({"type": "audio.append", "sample_rate": 16000,
                                      "audio": base64.b64encode(pcm).decode()}))
        await ws.send(json.dumps({"type": "audio.append", "sample_rate": 16000,
                                  "audio": base64.b64encode(pcm).decode()}))
        assert (await next_event(ws, "error"))["code"] == "audio_backlog"
        await ws.send(json.dumps({"type": "audio.commit", "utterance_id": "full"}))
        queued = await next_event(ws, "utterance.queued")
        assert queued["utterance_id"] == "full" and queued["duration_s"] == pytest.approx(1.0, abs=0.01)
        await ws.send(json.dumps({"type": "speak", "text": "and more"}))
        assert (await next_event(ws, "error"))["code"] == "audio_backlog"
        session = srv.manager.sessions[s["session_id"]]
        assert session.inbound.voice.speech.pending_samples <= 16000
        await ws.send(json.dumps({"type": "interrupt"}))
        finished = await next_event(ws, "playback.finished")
        assert finished == {"type": "playback.finished", "utterance_id": "full", "pts": None, "interrupted": True}
        assert session.inbound.voice.speech.pending_samples == 0


async def test_binary_audio_without_header_and_speech_in_mirror_mode_are_refused():
    async with running_server() as srv:
        ws = await control(srv, await create(srv, mode="mirror"))
        await ws.send(b"\0\0\0\0")
        assert (await next_event(ws, "error"))["code"] == "unexpected_binary"
        await ws.send(json.dumps({"type": "speak", "text": "hello"}))
        assert (await next_event(ws, "error"))["code"] == "wrong_mode"
        await ws.send(json.dumps({"type": "config", "mode": "agent"}))
        await ws.send(json.dumps({"type": "audio.append", "sample_rate": 16000}))
        await ws.send(b"\0\0\0")
        assert (await next_event(ws, "error"))["code"] == "bad_audio"


async def test_second_control_socket_is_refused():
    async with running_server() as srv:
        s = await create(srv)
        first = await control(srv, s)
        second = await control(srv, s)
        assert (await next_event(second, "error"))["code"] == "control_busy"
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await second.recv()
        assert closed.value.rcvd.code == 4409
        await first.send(json.dumps({"type": "ping"}))
        await next_event(first, "pong")


async def test_session_that_never_gets_an_offer_is_reaped():
    """Past the offer timeout a session without a peer is reaped; while its agent holds the control
    socket (viewers may come later) it is kept, and reaped once the socket closes."""
    # Two sessions at once, on an engine with any room: capacity is not what this tests.
    async with running_server(make_settings(offer_timeout_s=0.5), config="puppet") as srv:
        held = await create(srv)
        ws = await control(srv, held)
        lone = await create(srv)  # created after the held one: reaped by then, the held one is past its timeout
        assert await wait_until(lambda: lone["session_id"] not in srv.manager.sessions, 5)
        assert held["session_id"] in srv.manager.sessions
        await ws.close()
        assert await wait_until(lambda: held["session_id"] not in srv.manager.sessions, 5)
        text = (await srv.http.get("/metrics")).text
        assert 'avatar_sessions_closed_total{reason="no_offer"} 2.0' in text


async def test_health_metrics_demo_page_and_docs():
    async with running_server() as srv:
        health = (await srv.http.get("/healthz")).json()
        assert health["status"] == "ok" and health["max_sessions"] == 2
        res = await srv.http.get("/metrics")
        assert res.status_code == 200 and "avatar_sessions_active 0.0" in res.text
        for family in ("process_resident_memory_bytes", "process_open_fds", "avatar_server_threads",
                       "avatar_server_tasks"):
            assert f"\n{family} " in res.text, family
        assert res.headers["content-type"].startswith("text/plain")
        page = await srv.http.get("/")
        assert page.status_code == 200 and "<video" in page.text
        assert (await srv.http.get("/static/app.js")).status_code == 200
        paths = (await srv.http.get("/openapi.json")).json()["paths"]
        assert {"/v1/sessions", "/v1/sessions/{session_id}/offer", "/v1/sessions/{session_id}"} <= set(paths)
        assert (await srv.http.get("/docs")).status_code == 200
        info = (await srv.http.get("/v1/info")).json()
        assert info["fps"] == 25 and "ada" in info["avatars"] and set(info["presets"]) == {"quality", "fast"}
        assert info["ice_server_count"] == 0  # the page may then prepare its offer before the session exists
        fast = await create(srv, quality="fast", avatar="ada")
        link = srv.manager.sessions[fast["session_id"]].outbound.engine
        assert link.preset == "fast" and link.stream.quality_name.startswith("no-interp")
        assert fast["avatar"] == "ada"


def test_serve_refuses_a_public_bind_without_auth_token(capsys):
    assert cli_main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "auth token" in capsys.readouterr().err


def png(rgb: np.ndarray) -> str:
    """(H, W, 3) uint8 -> base64 PNG, encoded with PyAV."""
    import av

    codec = av.CodecContext.create("png", "w")
    codec.width, codec.height, codec.pix_fmt = rgb.shape[1], rgb.shape[0], "rgb24"
    packets = codec.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")) + codec.encode(None)
    return base64.b64encode(b"".join(bytes(p) for p in packets)).decode()


async def test_reference_image_instead_of_a_bundled_avatar_and_its_bad_inputs(astronaut):
    photo = png(astronaut)
    wall = png(np.full((200, 200, 3), 120, np.uint8))
    async with running_server(make_settings(max_image_bytes=len(photo) + 1000)) as srv:
        s = await create(srv, image=photo)
        assert s["avatar"] is None
        session = srv.manager.sessions[s["session_id"]]
        await asyncio.wait_for(session.lifecycle.engine_started.wait(), 30)
        assert await wait_until(lambda: session.outbound.engine_bytes() > 0, 10)  # the engine holds its rolling state
        assert (session.height, session.width) == (512, 512)
        cases = [
            ({"image": "not base64!"}, 400, "bad_image"),
            ({"image": base64.b64encode(b"hello, not an image").decode()}, 400, "bad_image"),
            ({"image": png(astronaut[:40, :40])}, 400, "bad_image"),
            ({"image": wall}, 400, "bad_image"),
            ({"image": photo, "avatar": "ada"}, 400, "bad_image"),
            ({"image": base64.b64encode(bytes(len(photo) + 2000)).decode()}, 413, "image_too_large"),
        ]
        for body, status, code in cases:
            assert_error(await srv.http.post("/v1/sessions", json=body), status, code)
        assert (await srv.http.post("/v1/sessions", json={"image": wall})).json()["error"]["message"] == "no face found"
        await assert_healthy(srv, 1)
    async with running_server(make_settings(), config="puppet") as srv:
        assert_error(await srv.http.post("/v1/sessions", json={"image": wall}), 400, "bad_image")


async def test_an_agent_session_outlives_a_peer_that_leaves_and_takes_the_next(monkeypatch):
    """A page watching an agent's session through ``/offer`` may leave: the agent, still on its
    control socket, keeps the session, and a later peer is answered and gets its frames; once
    the socket closes too, the session is reaped like any session without a peer."""
    loopback_only(monkeypatch)
    async with running_server(make_settings(offer_timeout_s=0.5), config="puppet") as srv:
        created = await create(srv, mode="agent")
        sid = created["session_id"]
        ws = await control(srv, created)
        session = srv.manager.sessions[sid]
        for _ in range(2):
            pc = await connect_client(srv, created, None)
            video = next(r.track for r in pc.getReceivers() if r.track.kind == "video")
            frame = await asyncio.wait_for(video.recv(), 20)
            assert frame.width > 0
            peer = session.pc
            await pc.close()
            assert await wait_until(lambda: session.pc is None, 10)
            assert sid in srv.manager.sessions and not session.closing
            assert peer.connectionState == "closed"
        broadcast = srv.manager.sessions[sid].outbound.broadcast
        assert broadcast.video.subscribers == 0  # the peers' tracks left the broadcast
        await ws.close()
        assert await wait_until(lambda: sid not in srv.manager.sessions, 5)
