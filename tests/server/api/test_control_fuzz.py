"""Property-based fuzzing of the control socket: JSON of every shape, the protocol's own messages
with wrong types and sizes, number literals of every form and length (thousands of digits, huge
exponents, ``NaN``), non-JSON text, binary frames with and without their announcement, messages of
every size up to the transport limit, interleaved on a controller and an observer socket of the
same session. Every message is answered
in order (a ping after each batch gets its pong), every ``error`` event has a code and a message,
neither socket is closed, and the session and server are healthy afterwards."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json

import pytest
from fuzz_budget import fuzz
from hypothesis import given
from hypothesis import strategies as st
from server_helpers import make_settings, running_server, session_tasks, wait_until
from websockets.sync.client import connect

from server.api.uvicorn_config import transport_limit
from server.base.protocol import control_subprotocols

pytestmark = pytest.mark.usefixtures("one_thread")
MAX_BYTES = 8192
LIMIT = transport_limit(make_settings(max_control_bytes=MAX_BYTES).limits)
FUZZ = fuzz(150)
TYPES = ["speak", "audio.append", "audio.commit", "interrupt", "config", "ping", "dance", "", None, 7]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=10,
)
pcm = st.binary(max_size=640).map(lambda b: base64.b64encode(b).decode())
field_values = json_values | pcm | st.sampled_from([16000, 24000, 7999, 96001, "agent", "mirror", "en-us",
                                                    "x" * 70, "a" * 3000, True])
fields = st.dictionaries(st.sampled_from(["text", "sample_rate", "audio", "utterance_id", "voice", "mode",
                                          "barge_in", "user_audio", "id", "extra"]), field_values, max_size=4)
valid = st.sampled_from([
    {"type": "speak", "text": "Hi."},
    {"type": "audio.append", "sample_rate": 16000, "audio": base64.b64encode(bytes(640)).decode()},
    {"type": "audio.append", "sample_rate": 16000},  # the next binary message carries the PCM
    {"type": "audio.commit"},
    {"type": "interrupt"},
    {"type": "config", "mode": "agent", "barge_in": True},
    {"type": "config", "mode": "mirror"},
    {"type": "ping", "id": 1},
])


@st.composite
def number_literal(draw: st.DrawFn) -> str:
    """A JSON number as written: any sign, digits (up to thousands), fraction and exponent, or a
    constant Python's parser takes beyond JSON."""
    if draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999999", "1.5e-99999", "-0", "0.0"]))
    digits = "1" + "0" * draw(st.sampled_from([18, 19, 31, 32, 400, 4299, 4300, 6000]) | st.integers(0, 40))
    fraction = draw(st.sampled_from(["", "", "", ".5", "." + "3" * 400]))
    exponent = draw(st.sampled_from(["", "", "e"]))
    if exponent:
        exponent += str(draw(st.integers(-100_000, 100_000) | st.integers(-320, 320)))
    return draw(st.sampled_from(["", "-"])) + digits + fraction + exponent


@st.composite
def any_message(draw: st.DrawFn) -> str | bytes:
    kind = draw(st.sampled_from(["valid", "shaped", "json", "text", "binary", "number", "too_large"]))
    if kind == "number":
        name, field = draw(st.sampled_from([("ping", "id"), ("audio.append", "sample_rate"), ("config", "mode")]))
        literal = draw(number_literal())
        return "{" + f'"type": "{name}", "{field}": {literal}' + "}"
    if kind == "valid":
        return json.dumps(draw(valid))
    if kind == "shaped":
        return json.dumps({"type": draw(st.sampled_from(TYPES)), **draw(fields)})
    if kind == "json":
        return json.dumps(draw(json_values))
    if kind == "text":
        return draw(st.text(max_size=200))
    if kind == "binary":
        return draw(st.binary(max_size=4096))
    size = draw(st.integers(MAX_BYTES + 1, LIMIT))
    if draw(st.booleans()):
        return bytes(size)
    return (draw(st.sampled_from(["x", "{", '{"type": "speak", "text": "'])) * size)[:size]


def messages() -> st.SearchStrategy[str | bytes]:
    """Within what the transport takes (past it the socket closes, by design: tested elsewhere)."""
    return any_message().filter(lambda m: len(m) <= LIMIT)


def assert_event(raw: str) -> dict:
    event = json.loads(raw)
    assert isinstance(event, dict) and isinstance(event.get("type"), str), raw
    if event["type"] == "error":
        assert isinstance(event["code"], str) and event["code"], raw
        assert isinstance(event["message"], str) and event["message"], raw
    return event


def answered(ws, marker: str, seen: dict[str, int]) -> None:
    """Read until the pong for ``marker``: everything sent before it has been handled."""
    ws.send(json.dumps({"type": "ping", "id": marker}))
    while True:
        event = assert_event(ws.recv(timeout=15))
        key = event["code"] if event["type"] == "error" else event["type"]
        seen[key] = seen.get(key, 0) + 1
        if event["type"] == "pong" and event.get("id") == marker:
            return


async def test_control_and_observer_sockets_answer_every_message(monkeypatch):
    fuzz_settings = make_settings(max_control_bytes=MAX_BYTES, offer_timeout_s=600.0, tts="espeak")
    async with running_server(fuzz_settings, config="puppet") as srv:
        s = (await srv.http.post("/v1/sessions", json={"mode": "agent"})).json()
        url = f"{srv.ws_url}/v1/sessions/{s['session_id']}/control"
        seen: dict[str, int] = {}
        markers = (f"m{i}" for i in itertools.count())

        def fuzz() -> None:
            with connect(url, subprotocols=control_subprotocols(s["token"]), max_size=2**22) as control, \
                 connect(f"{url}?role=observer", subprotocols=control_subprotocols(s["token"])) as observer:

                @FUZZ
                @given(st.lists(st.tuples(st.sampled_from(["control"] * 4 + ["observer"]), messages()),
                                min_size=1, max_size=6))
                def batch(steps: list[tuple[str, str | bytes]]) -> None:
                    for which, message in steps:
                        (control if which == "control" else observer).send(message)
                    answered(control, next(markers), seen)
                    answered(observer, next(markers), seen)

                batch()

        await asyncio.to_thread(fuzz)
        for code in ("bad_json", "bad_message", "message_too_large", "unexpected_binary", "read_only"):
            assert seen.get(code), (code, seen)
        session = srv.manager.sessions[s["session_id"]]
        assert await wait_until(lambda: not session.control_attached, 5)  # the sockets closed,
        assert not session.closing  # the session lives on
        assert (await srv.http.get("/healthz")).status_code == 200
        await srv.manager.close(s["session_id"], "test_done")
        assert await wait_until(lambda: not session_tasks(), 10)
