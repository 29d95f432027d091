"""No token in any log line, error message, event or ``/metrics``: the real server, several sessions,
both control-socket auth forms, the page's viewer link, wrong tokens, every log captured (the
loggers and uvicorn's own access-log output on the terminal)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import websockets
from server_helpers import make_settings, running_server

from server.api.redact import REDACTED
from server.base.protocol import control_subprotocols
from server.client import AvatarSession

SERVER_TOKEN = "srv-Zq8uY3mK0pLx7TvB2wNc"
WRONG_TOKEN = "wrong-Hk4sG9dQ1eRf6JyA"
LOGGERS = ("uvicorn", "uvicorn.access", "uvicorn.error", "server", "aiortc", "")
pytestmark = pytest.mark.usefixtures("one_thread")


async def events_until_pong(ws, marker: str) -> list[str]:
    await ws.send(json.dumps({"type": "ping", "id": marker}))
    seen = []
    while True:
        raw = await asyncio.wait_for(ws.recv(), 5)
        seen.append(raw)
        if json.loads(raw).get("id") == marker:
            return seen


@pytest.fixture
def plain_records(monkeypatch):
    """Log records as Python makes them: the app under test must install the redaction itself."""
    monkeypatch.setattr(logging, "_logRecordFactory", logging.LogRecord)


@pytest.fixture
def verbose_logs(caplog):
    """Every server logger at INFO into caplog, uvicorn's access log included (it does not propagate)."""
    saved = {name: logging.getLogger(name).level for name in LOGGERS}
    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
        logging.getLogger(name).addHandler(caplog.handler)
    yield caplog
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)
        logging.getLogger(name).removeHandler(caplog.handler)


async def test_tokens_never_reach_logs_errors_events_or_metrics(plain_records, verbose_logs, capfd):
    settings = make_settings(auth_token=SERVER_TOKEN, max_sessions=4, tts="espeak")
    said: list[str] = []
    tokens = [SERVER_TOKEN, WRONG_TOKEN]
    # Two sessions at once, on an engine with any room: capacity is not what this tests.
    async with running_server(settings, config="puppet") as srv:
        for name in LOGGERS:  # uvicorn configured its loggers when the server was built
            logging.getLogger(name).setLevel(logging.INFO)
        auth = {"Authorization": f"Bearer {SERVER_TOKEN}"}
        sessions = [(await srv.http.post("/v1/sessions", json={"mode": "agent"}, headers=auth)).json()
                    for _ in range(2)]
        tokens += [s["token"] for s in sessions]
        a, b = sessions
        base = f"{srv.ws_url}/v1/sessions"

        async with websockets.connect(f"{base}/{a['session_id']}/control?token={a['token']}") as ws:  # old form
            said += await events_until_pong(ws, "query")
            await ws.send(json.dumps({"type": "speak", "text": "Hello."}))
            said += await events_until_pong(ws, "query-2")
        async with websockets.connect(f"{base}/{b['session_id']}/control",
                                      subprotocols=control_subprotocols(b["token"])) as ws:
            said += await events_until_pong(ws, "subprotocol")
        async with websockets.connect(f"{base}/{b['session_id']}/control?token={WRONG_TOKEN}&role=observer") as ws:
            said.append(await ws.recv())
        async with websockets.connect(f"{base}/{b['session_id']}/control",
                                      subprotocols=control_subprotocols(WRONG_TOKEN)) as ws:
            said.append(await ws.recv())

        answers = [
            await srv.http.post(f"/v1/sessions/{a['session_id']}/offer", json={"sdp": "v=0\r\n", "type": "offer"},
                                headers={"Authorization": f"Bearer {a['token']}"}),
            await srv.http.post(f"/v1/sessions/{b['session_id']}/offer", json={"sdp": "v=0", "type": "offer"},
                                headers={"Authorization": f"Bearer {WRONG_TOKEN}"}),
            await srv.http.post("/v1/sessions", json={}, headers={"Authorization": f"Bearer {WRONG_TOKEN}"}),
            await srv.http.delete(f"/v1/sessions/{b['session_id']}", headers={"Authorization": f"Bearer {b['token']}"}),
        ]
        agent = await AvatarSession.create(srv.url, server_token=SERVER_TOKEN)  # the client library's way
        tokens.append(agent.token)
        said.append(agent.viewer_url.split("#")[0])
        page = await srv.http.get(f"/?session={agent.id}&token={agent.token}")  # an old viewer link
        assert page.status_code == 200
        uid = await agent.say("Hello.")
        said.append((await agent.wait_for("utterance.queued", uid, timeout_s=20)).model_dump_json())
        answers += [await srv.http.get("/metrics"), await srv.http.get("/v1/info")]
        await agent.close()
        assert [r.status_code for r in answers] == [400, 401, 401, 204, 200, 200]
        said += [r.text for r in answers]
    out, err = capfd.readouterr()
    logs = verbose_logs.text + out + err
    assert "WebSocket /v1/sessions/" in logs and "control?token=" + REDACTED in logs  # the access log was read
    assert f"GET /?session={agent.id}&token={REDACTED}" in logs
    for token in tokens:
        assert token not in logs, f"a token in the logs: {token[:6]}…"
        for text in said:
            assert token not in text, f"a token in an answer or event: {text[:200]}"
