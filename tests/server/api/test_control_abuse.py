"""A hostile agent on the control socket: JSON nested thousands deep, a flood of one-sample
utterances, reconnecting the moment a socket closed. Each gets a clear answer (an ``error`` event
with its code, the socket left open; or the socket accepted), and a witness session on the same
server keeps its frame rate through the flood."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest
from server_helpers import admitted_session, make_settings, running_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from witness_helpers import ROOM, attacker, witness

from server.base.protocol import control_subprotocols

pytestmark = pytest.mark.usefixtures("one_thread")
ONE_SAMPLE = base64.b64encode(b"\x01\x00").decode()


# One-sample utterances, each with a new id, as fast as the socket takes them.
FLOOD = """
import base64, itertools, json, sys
from websockets.sync.client import connect
from server.base.protocol import control_subprotocols
audio = base64.b64encode(b"\\x01\\x00").decode()
with connect(sys.argv[1], subprotocols=control_subprotocols(sys.argv[2])) as ws:
    for i in itertools.count():
        ws.send(json.dumps({"type": "audio.append", "sample_rate": 16000, "audio": audio, "utterance_id": f"f{i}"}))
"""


def url(srv, session: dict) -> str:
    return f"{srv.ws_url}/v1/sessions/{session['session_id']}/control"


def control(srv, session: dict) -> ClientConnection:
    return connect(url(srv, session), subprotocols=control_subprotocols(session["token"]), max_size=2**22,
                   open_timeout=10)


def until_pong(ws: ClientConnection, marker: str, timeout_s: float = 30) -> list[dict]:
    """The events up to the pong answering ``ping`` ``marker`` (sent here)."""
    ws.send(json.dumps({"type": "ping", "id": marker}))
    events = []
    while True:
        event = json.loads(ws.recv(timeout=timeout_s))
        if event["type"] == "pong" and event.get("id") == marker:
            return events
        events.append(event)


def errors(events: list[dict]) -> list[str]:
    return [e["code"] for e in events if e["type"] == "error"]


def append(utterance: str) -> str:
    return json.dumps({"type": "audio.append", "sample_rate": 16000, "audio": ONE_SAMPLE, "utterance_id": utterance})


async def test_deeply_nested_json_gets_an_error_and_the_socket_stays_open():
    async with running_server(make_settings(max_sessions=1), config="puppet") as srv:
        session = await admitted_session(srv, {"mode": "agent"})

        def probe() -> list[str]:
            with control(srv, session) as ws:
                for depth in (5000, 33, 31):
                    ws.send("[" * depth + "]" * depth)
                return errors(until_pong(ws, "after"))

        assert await asyncio.to_thread(probe) == ["too_deep", "too_deep", "bad_message"]


async def test_reconnecting_right_after_a_clean_close_is_accepted():
    async with running_server(make_settings(max_sessions=1), config="puppet") as srv:
        session = await admitted_session(srv, {"mode": "agent"})

        def reconnect(times: int) -> list[int | None]:
            """Close codes of the refused sockets; each accepted one is closed cleanly (its close frame
            sent) and the next opened at once, before the server's answer to the close arrives."""
            refused, sockets = [], []
            for i in range(times):
                sockets.append(ws := control(srv, session))
                try:
                    until_pong(ws, f"r{i}", 10)
                except ConnectionClosed as exc:
                    refused.append(exc.rcvd.code if exc.rcvd else None)
                    continue
                with ws.protocol_mutex:
                    ws.protocol.send_close(1000)
                    ws.send_data()
            for ws in sockets:
                ws.close()
            return refused

        assert await asyncio.to_thread(reconnect, 20) == []


async def test_one_sample_utterances_are_capped_and_a_flood_leaves_a_witness_its_frame_rate():
    settings = make_settings(max_sessions=2, max_queued_utterances=64, offer_timeout_s=600.0, **ROOM)
    async with running_server(settings, config="puppet") as srv:
        session = await admitted_session(srv, {"mode": "agent"})

        def cap() -> list[str]:
            with control(srv, session) as ws:
                for i in range(100):
                    ws.send(append(f"u{i}"))
                return errors(until_pong(ws, "capped"))

        assert await asyncio.to_thread(cap) == ["too_many_utterances"] * 36
        registry = srv.app.state.metrics.registry

        def appends() -> float:
            return registry.get_sample_value("avatar_control_messages_total", {"type": "audio.append"}) or 0.0

        async with witness(srv) as seen, attacker(FLOOD, url(srv, session), session["token"]) as flooder:
            t0, before = time.monotonic(), appends()
            await asyncio.sleep(6.0)
            assert flooder.returncode is None, "the flooding client stopped early"
            kept = seen.assert_kept(t0 + 1.0)
            print(f"witness {seen.quiet_fps:.1f} fps before the flood, {kept:.1f} during it")
            read = appends() - before  # the socket is read at its rate after a burst, however fast the client
            assert 0 < read <= settings.limits.control_messages_per_s * (time.monotonic() - t0 + 2.0), read
