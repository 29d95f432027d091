"""A busy or careless agent on the control socket: a burst of ten thousand pings, a minute of PCM
pushed as 20 ms ``audio.append`` messages in one go, messages past the size limit, numbers of
absurd length, a NUL in ``speak`` text. Each is answered (slowly, for a burst) with the socket
left open: the server's keepalive does not time a busy client out behind the backlog the server
itself has not read yet, and only a message over the transport's limit closes the socket, with
a code and a reason."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import threading
import time

import pytest
from server_helpers import admitted_session, make_settings, running_server, spawned_server, speech_pcm16, wait_until
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.uri import parse_uri

from server.api.uvicorn_config import transport_limit
from server.base.protocol import control_subprotocols

pytestmark = pytest.mark.usefixtures("one_thread")
# Keepalive far shorter than the backlog takes to read: the pong waits behind thousands of messages.
QUICK_KEEPALIVE = {"ws_ping_interval_s": 0.2, "ws_ping_timeout_s": 0.3}


def control(srv, session: dict) -> ClientConnection:
    return connect(f"{srv.ws_url}/v1/sessions/{session['session_id']}/control", ping_interval=None,
                   subprotocols=control_subprotocols(session["token"]), max_size=2**24, open_timeout=10)


def burst(ws: ClientConnection, messages: list[str], until: str) -> list[dict]:
    """Send ``messages`` back to back while reading every event, up to the pong of ping ``until``."""
    events: list[dict] = []

    def send() -> None:
        for message in messages:
            ws.send(message)
        ws.send(json.dumps({"type": "ping", "id": until}))

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    while True:
        event = json.loads(ws.recv(timeout=60))
        if event["type"] == "pong" and event.get("id") == until:
            sender.join(10)
            return events
        events.append(event)


@pytest.mark.parametrize("count, rate", [(3000, 1000.0), pytest.param(10_000, 2000.0, marks=pytest.mark.slow)])
async def test_a_burst_of_pings_is_all_answered_slowly_with_the_socket_open(count, rate):
    settings = make_settings(max_sessions=1, control_messages_per_s=rate, **QUICK_KEEPALIVE)
    async with running_server(settings) as srv:
        session = await admitted_session(srv, {"mode": "agent"})

        def flood() -> tuple[list[dict], float]:
            with control(srv, session) as ws:
                t0 = time.monotonic()
                events = burst(ws, [json.dumps({"type": "ping", "id": i}) for i in range(count)], "last")
                return events, time.monotonic() - t0

        events, took = await asyncio.to_thread(flood)
        assert [e["id"] for e in events if e["type"] == "pong"] == list(range(count))
        assert [e for e in events if e["type"] == "error"] == []
        assert took >= (count - 2 * rate) / rate * 0.8, f"read at its pace: {took:.1f} s"


@pytest.mark.slow
async def test_a_burst_through_a_nodes_front_is_all_answered_with_the_socket_open():
    env = {"AVATAR_ENGINE_SETTLE_S": "0", "AVATAR_WARM_UP": "false", "AVATAR_CONTROL_MESSAGES_PER_S": "1000",
           **{f"AVATAR_{k.upper()}": str(v) for k, v in QUICK_KEEPALIVE.items()}}
    async with spawned_server("micro", threads=1, extra=("--web-processes", "2"), env=env) as srv:
        session = await admitted_session(srv, {"mode": "agent"}, patience_s=30)
        url = f"{srv.ws_url}/v1/sessions/{session['session_id']}/control"

        def flood() -> list[dict]:
            with connect(url, ping_interval=None, subprotocols=control_subprotocols(session["token"]),
                         open_timeout=10) as ws:
                return burst(ws, [json.dumps({"type": "ping", "id": i}) for i in range(5000)], "last")

        events = await asyncio.to_thread(flood)
        assert [e["id"] for e in events if e["type"] == "pong"] == list(range(5000))


async def test_a_client_that_sends_a_burst_and_never_reads_is_dropped_by_the_keepalive():
    """Patience is for a client that reads: one whose answers pile up unsent (a host gone, a flood
    that never reads) is closed after the keepalive timeout, not held while its backlog is read."""
    settings = make_settings(max_sessions=1, control_messages_per_s=1000.0, **QUICK_KEEPALIVE)
    async with running_server(settings) as srv:
        created = await admitted_session(srv, {"mode": "agent"})
        session = srv.manager.sessions[created["session_id"]]
        url = f"{srv.ws_url}/v1/sessions/{session.id}/control"
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client = ClientProtocol(parse_uri(url), subprotocols=control_subprotocols(created["token"]))

        def handshake() -> None:
            raw.connect(("127.0.0.1", int(srv.url.rsplit(":", 1)[1])))
            client.send_request(client.connect())
            raw.sendall(b"".join(client.data_to_send()))
            while client.handshake_exc is None and not client.events_received():
                client.receive_data(raw.recv(65536))  # the handshake's answer; nothing is read after it

        await asyncio.to_thread(handshake)
        for i in range(1500):  # 6 MB of pongs to come back: more than the socket buffers hold
            client.send_text(json.dumps({"type": "ping", "id": f"{i:04}" + "x" * 4000}).encode())
        sender = threading.Thread(target=lambda: raw.sendall(b"".join(client.data_to_send())), daemon=True)
        sender.start()
        try:
            assert await wait_until(lambda: session.control_attached, 5)
            assert await wait_until(lambda: not session.control_attached, 20), "the socket is still held"
            assert not session.closing  # the session waits for its agent to come back
        finally:
            with contextlib.suppress(OSError):  # the server reset it already
                raw.shutdown(socket.SHUT_RDWR)  # ends the sender's blocked send too
            raw.close()
            sender.join(5)


async def test_a_minute_of_pcm_pushed_in_20_ms_messages_is_all_queued():
    settings = make_settings(max_sessions=1, control_messages_per_s=1000.0, max_audio_backlog_s=61.0,
                             **QUICK_KEEPALIVE)
    async with running_server(settings) as srv:
        session = await admitted_session(srv, {"mode": "agent"})
        pcm = speech_pcm16(16000).tobytes()
        step = 640  # 20 ms of 16 kHz PCM16
        messages = [json.dumps({"type": "audio.append", "sample_rate": 16000, "utterance_id": "minute",
                                "audio": base64.b64encode(pcm[(i * step) % (len(pcm) - step):][:step]).decode()})
                    for i in range(3000)]
        messages.append(json.dumps({"type": "audio.commit", "utterance_id": "minute"}))

        def push() -> list[dict]:
            with control(srv, session) as ws:
                return burst(ws, messages, "pushed")

        events = await asyncio.to_thread(push)
        assert [e for e in events if e["type"] == "error"] == []
        queued = [e for e in events if e["type"] == "utterance.queued"]
        assert [e["utterance_id"] for e in queued] == ["minute"]
        assert queued[0]["duration_s"] == pytest.approx(60.0, abs=0.1)


async def test_messages_up_to_the_transport_limit_are_answered_and_past_it_closed_with_a_reason():
    settings = make_settings(max_sessions=1)
    async with running_server(settings) as srv:
        session = await admitted_session(srv, {"mode": "agent"})
        limit = transport_limit(settings.limits)

        def probe() -> tuple[list[str], int | None, str]:
            with control(srv, session) as ws:
                most = settings.limits.max_control_bytes
                for size in (most + 1, most + 5000, 700_000, limit):
                    ws.send(json.dumps({"type": "ping", "id": "x" * (size - 26)}))
                ws.send(b"\0" * limit)
                codes = [e["code"] for e in burst(ws, [], "sized") if e["type"] == "error"]
                ws.send("x" * (limit + 1))
                try:
                    while True:
                        ws.recv(timeout=10)
                except ConnectionClosed as exc:
                    return codes, exc.rcvd.code if exc.rcvd else None, exc.rcvd.reason if exc.rcvd else ""

        codes, close, reason = await asyncio.to_thread(probe)
        assert codes == ["message_too_large"] * 4 + ["unexpected_binary"]
        assert close == 1009 and str(limit) in reason, (close, reason)


@pytest.mark.parametrize("number", ["1" * 5000, "-" + "9" * 400, "1e999999", "1" * 400 + ".5", "NaN", "-Infinity",
                                    "1.5e-99999"])
async def test_absurd_numbers_get_bad_message_with_the_socket_open(number):
    async with running_server(make_settings(max_sessions=1)) as srv:
        session = await admitted_session(srv, {"mode": "agent"})

        def probe() -> list[dict]:
            with control(srv, session) as ws:
                return burst(ws, [f'{{"type": "ping", "id": {number}}}',
                                  f'{{"type": "audio.append", "sample_rate": {number}}}'], "after")

        events = await asyncio.to_thread(probe)
        assert [e["code"] for e in events if e["type"] == "error"] == ["bad_message", "bad_message"], events


async def test_a_nul_in_speak_text_is_refused_and_the_voice_speaks_on():
    async with running_server(make_settings(max_sessions=1)) as srv:
        session = await admitted_session(srv, {"mode": "agent"})

        def speak() -> list[dict]:
            with control(srv, session) as ws:
                out = burst(ws, [json.dumps({"type": "speak", "text": "a\u0000b", "utterance_id": "nul"}),
                                 json.dumps({"type": "speak", "text": "bell\u0007", "utterance_id": "bel"}),
                                 json.dumps({"type": "speak", "text": "Hello there.\n\tAgain.", "utterance_id": "ok"})],
                            "spoken")
                while not any(e["type"] == "utterance.queued" for e in out):
                    out.append(json.loads(ws.recv(timeout=30)))
                return out

        events = await asyncio.to_thread(speak)
        errors = [e for e in events if e["type"] == "error"]
        assert [e["code"] for e in errors] == ["bad_message", "bad_message"], errors
        assert "U+0000" in errors[0]["message"] and "U+0007" in errors[1]["message"]
        assert [e["utterance_id"] for e in events if e["type"] == "utterance.queued"] == ["ok"]
