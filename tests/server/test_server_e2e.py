"""End to end over real WebRTC on loopback: an aiortc client talks to the served app, real engine."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import av
import numpy as np
import pytest
import websockets
from agent_helpers import Events
from aiortc import RTCConfiguration, RTCPeerConnection
from server_helpers import (
    OPUS_CLOCK,
    VIDEO_CLOCK,
    Received,
    SpeechTrack,
    av_offset,
    collect,
    connect_client,
    loopback_only,
    make_settings,
    running_server,
    server_threads,
    session_tasks,
    speech_pcm16,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("one_thread")


async def test_mirror_then_agent_session_end_to_end(monkeypatch, tmp_path):
    loopback_only(monkeypatch)
    async with running_server(make_settings(record_dir=tmp_path)) as srv:
        res = await srv.http.post("/v1/sessions", json={"mode": "mirror", "record": True})
        assert res.status_code == 201, res.text
        session = res.json()
        auth = {"Authorization": f"Bearer {session['token']}"}
        ws = await websockets.connect(
            f"{srv.ws_url}/v1/sessions/{session['session_id']}/control?token={session['token']}"
        )
        events = Events(ws)
        mic = SpeechTrack(speech_pcm16())
        t_offer = time.monotonic()
        pc = await connect_client(srv, session, mic)
        video, audio, stop = Received("video"), Received("audio"), asyncio.Event()
        readers = [
            asyncio.create_task(collect(r.track, video if r.track.kind == "video" else audio, stop))
            for r in pc.getReceivers()
            if r.track.kind in ("video", "audio")
        ]
        assert await wait_until(lambda: len(video.pts) >= 75 and len(audio.pts) >= 100, 20)
        first_frame_s = video.arrival[0] - t_offer
        again = await srv.http.post(f"/v1/sessions/{session['session_id']}/offer", headers=auth,
                                    json={"sdp": pc.localDescription.sdp, "type": "offer"})
        assert again.status_code == 409 and again.json()["error"]["code"] == "already_offered"

        # Agent mode: one utterance from the server's TTS, one pushed as PCM16 at another rate.
        await ws.send(json.dumps({"type": "config", "mode": "agent"}))
        await ws.send(json.dumps({"type": "speak", "text": "One, two, three.", "utterance_id": "u1"}))
        tone = (np.sin(np.arange(12_000) * 2 * np.pi * 220 / 24_000) * 8000).astype("<i2")
        await ws.send(json.dumps({"type": "audio.append", "sample_rate": 24_000,
                                  "audio": base64.b64encode(tone[:6000].tobytes()).decode()}))
        await ws.send(json.dumps({"type": "audio.append", "sample_rate": 24_000}))
        await ws.send(tone[6000:].tobytes())
        await ws.send(json.dumps({"type": "audio.commit", "utterance_id": "u2"}))
        await ws.send(json.dumps({"type": "ping", "id": 7}))
        assert await wait_until(lambda: events.has("playback.finished", "u2"), 30), events.summary()
        # Interrupt mid-utterance: it closes as interrupted well before its natural end.
        await ws.send(json.dumps({"type": "speak", "utterance_id": "u3",
                                  "text": "This is a long sentence that will be cut off long before it ends, "
                                          "because the user has something more important to say."}))
        assert await wait_until(lambda: events.has("playback.started", "u3"), 15), events.summary()
        await ws.send(json.dumps({"type": "interrupt"}))
        assert await wait_until(lambda: events.has("playback.finished", "u3"), 5), events.summary()
        stop.set()

        # Video at the engine's size, audio in 20 ms Opus frames; both on their media clock: pts
        # advance by whole frame/packet periods, as fast as wall time. (Playout skips a slot rather
        # than bursting when the machine stalls, so a step may span several periods.)
        assert set(video.shapes) == {(256, 256)}
        for rx, clock, period in ((video, VIDEO_CLOCK, VIDEO_CLOCK // 25), (audio, OPUS_CLOCK, 960)):
            steps = np.diff(rx.pts)
            assert np.all(steps > 0) and np.all(steps % period == 0), np.unique(steps)
            media_span = (rx.pts[-1] - rx.pts[0]) / clock
            wall_span = rx.arrival[-1] - rx.arrival[0]
            assert media_span >= 2.0 and abs(media_span - wall_span) < 0.1 * wall_span + 0.2, (media_span, wall_span)
            assert len(rx.pts) >= 0.5 * media_span * clock / period, np.unique(steps, return_counts=True)
        # A/V alignment: the server releases audio and video of media time t together (within a
        # frame); what the client receives agrees, up to the jitter of a contended two-core machine.
        server_offset = srv.manager.sessions[session["session_id"]].outbound.sync.offset_s
        assert abs(server_offset) <= 1 / 25, f"server A/V offset {server_offset * 1000:.1f} ms"
        offset = av_offset(video, audio)
        assert abs(offset) <= 3 / 25, f"client A/V offset {offset * 1000:.1f} ms"

        # Control protocol: ready first; each utterance started -> finished, and complete (queued) before it
        # has played out; a streamed one (speech synthesised clause by clause) may start before it is complete.
        kinds = [e["type"] for _, e in events.items]
        assert kinds[0] == "session.ready"
        u3 = next(e for e in events.of("playback.finished") if e["utterance_id"] == "u3")
        u3_start = next(e for e in events.of("playback.started") if e["utterance_id"] == "u3")["pts"]
        # The sentence lasts about 6 s; cut right after it started, it played a fraction of that (and may
        # never have been complete, so never queued, when the cut came).
        assert u3["interrupted"] and u3["pts"] - u3_start < 2.0, (u3, u3_start)
        for queued in events.of("utterance.queued", "u3"):
            assert u3["pts"] - u3_start < queued["duration_s"] - 1.0
        for uid in ("u1", "u2", "u3"):
            assert events.index("playback.started", uid) < events.index("playback.finished", uid)
        for uid in ("u1", "u2"):
            assert events.index("utterance.queued", uid) < events.index("playback.finished", uid)
        assert events.index("playback.finished", "u1") < events.index("playback.started", "u2")
        assert events.of("pong")[0]["id"] == 7
        metrics = events.of("metrics")
        assert metrics and metrics[-1]["mic_seconds"] > 1.0 and metrics[-1]["frames_generated"] > 0
        # The only error allowed is the machine's: a contended CPU can leave the engine behind real time.
        assert {e["code"] for e in events.of("error")} <= {"engine_overloaded"}, events.of("error")
        u1 = next(e for e in events.of("utterance.queued") if e["utterance_id"] == "u1")
        assert 0.5 < u1["duration_s"] < 3.0

        # Teardown: DELETE frees the session, its peer, worker thread, tasks; the MP4 is finished.
        server_pc = srv.manager.sessions[session["session_id"]].pc
        res = await srv.http.delete(f"/v1/sessions/{session['session_id']}", headers=auth)
        assert res.status_code == 204
        assert (await srv.http.delete(f"/v1/sessions/{session['session_id']}", headers=auth)).status_code == 404
        assert srv.manager.sessions == {}
        assert server_pc.connectionState == "closed"
        assert await wait_until(lambda: not server_threads() and not session_tasks(), 5), (
            server_threads(), session_tasks())
        await asyncio.wait_for(events.task, 5)  # the server closed the control socket
        assert ws.close_code == 4000
        await pc.close()
        await asyncio.gather(*readers, return_exceptions=True)

        with av.open(str(tmp_path / f"{session['session_id']}.mp4")) as mp4:
            kinds = {s.type: s.codec_context.name for s in mp4.streams}
            assert kinds == {"video": "h264", "audio": "aac"}
            assert mp4.streams.video[0].frames > 25
            voice = np.concatenate([f.to_ndarray().reshape(-1) for f in mp4.decode(audio=0)])
        assert np.abs(voice).max() > 0.05  # the avatar's voice is the speech that drove it, not silence
        print(f"first frame {first_frame_s * 1000:.0f} ms after offer; A/V offset {server_offset * 1000:.1f} ms "
              f"at release, {offset * 1000:.1f} ms at the client; "
              f"metrics {metrics[-1]}")


@pytest.mark.parametrize("how", ["close", "vanish"])
async def test_departed_peer_is_freed_within_10_s(monkeypatch, how):
    """A client that closes its peer (DTLS close) or just vanishes (no packets) is reaped."""
    loopback_only(monkeypatch)
    async with running_server(make_settings(peer_timeout_s=3.0)) as srv:
        session = (await srv.http.post("/v1/sessions", json={"mode": "mirror"})).json()
        pc = await connect_client(srv, session, SpeechTrack(speech_pcm16()))
        video, stop = Received("video"), asyncio.Event()
        track = next(r.track for r in pc.getReceivers() if r.track.kind == "video")
        reader = asyncio.create_task(collect(track, video, stop))
        assert await wait_until(lambda: len(video.pts) >= 5, 20)
        t_gone = time.monotonic()
        if how == "close":
            await pc.close()
        else:
            ice = pc.getTransceivers()[0].receiver.transport.transport
            await ice._connection.close()  # sockets gone, no DTLS goodbye: the server hears nothing
        assert await wait_until(lambda: not srv.manager.sessions, 10), "session still alive after 10 s"
        assert await wait_until(lambda: not server_threads() and not session_tasks(), 2)
        print(f"{how}: freed after {time.monotonic() - t_gone:.1f} s")
        stop.set()
        await pc.close()
        reader.cancel()


async def test_peer_that_never_completes_ice_is_freed(monkeypatch):
    """The offer is answered but the client never applies the answer: ICE cannot connect."""
    loopback_only(monkeypatch)
    async with running_server(make_settings(connect_timeout_s=2.0)) as srv:
        session = (await srv.http.post("/v1/sessions", json={"mode": "agent"})).json()
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTransceiver("audio", direction="recvonly")
        pc.addTransceiver("video", direction="recvonly")
        await pc.setLocalDescription(await pc.createOffer())
        res = await srv.http.post(f"/v1/sessions/{session['session_id']}/offer",
                                  json={"sdp": pc.localDescription.sdp, "type": "offer"},
                                  headers={"Authorization": f"Bearer {session['token']}"})
        assert res.status_code == 200
        assert await wait_until(lambda: not srv.manager.sessions, 5)
        assert await wait_until(lambda: not server_threads() and not session_tasks(), 2)
        text = (await srv.http.get("/metrics")).text
        assert 'avatar_sessions_closed_total{reason="connect_timeout"} 1.0' in text
        await pc.close()


async def test_puppet_config_serves_the_procedural_avatar(monkeypatch):
    """``avatar serve --config puppet``: the renderer as the engine, same API and media path."""
    loopback_only(monkeypatch)
    async with running_server(make_settings(), config="puppet") as srv:
        for quality in ("quality", "fast"):
            res = await srv.http.post("/v1/sessions", json={"mode": "mirror", "quality": quality})
            assert res.status_code == 201, res.text
            session = res.json()
            pc = await connect_client(srv, session, SpeechTrack(speech_pcm16()))
            video, stop = Received("video"), asyncio.Event()
            track = next(r.track for r in pc.getReceivers() if r.track.kind == "video")
            reader = asyncio.create_task(collect(track, video, stop))
            assert await wait_until(lambda video=video: len(video.pts) >= 25, timeout_s=20), len(video.pts)
            stop.set()
            assert set(video.shapes) == {(256, 256)}
            steps = np.diff(video.pts)
            assert (steps > 0).all() and (steps % (VIDEO_CLOCK // 25) == 0).all()  # on the 25 fps grid
            await srv.http.delete(f"/v1/sessions/{session['session_id']}",
                                  headers={"Authorization": f"Bearer {session['token']}"})
            await pc.close()
            await asyncio.gather(reader, return_exceptions=True)
