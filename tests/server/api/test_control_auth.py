"""Control-socket authentication: the token as the ``avatar.token.<token>`` subprotocol (the server
selects ``avatar.v1``), the ``?token=`` form for existing clients, and refusals that name no token."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets
from server_helpers import make_settings, running_server

from server.base.protocol import control_subprotocols

pytestmark = pytest.mark.usefixtures("one_thread")


async def next_event(ws, kind: str) -> dict:
    async def find() -> dict:
        while True:
            event = json.loads(await ws.recv())
            if event["type"] == kind:
                return event

    return await asyncio.wait_for(find(), 5)


async def test_subprotocol_and_query_token_both_open_the_socket_and_wrong_ones_are_refused():
    async with running_server(make_settings(), config="puppet") as srv:
        s = (await srv.http.post("/v1/sessions", json={"mode": "agent"})).json()
        url = f"{srv.ws_url}/v1/sessions/{s['session_id']}/control"
        async with websockets.connect(url, subprotocols=control_subprotocols(s["token"])) as ws:
            assert ws.subprotocol == "avatar.v1"
            await ws.send(json.dumps({"type": "ping", "id": "sub"}))
            assert (await next_event(ws, "pong"))["id"] == "sub"
        async with websockets.connect(f"{url}?token={s['token']}&role=observer") as ws:  # the older form
            assert ws.subprotocol is None
            await ws.send(json.dumps({"type": "ping", "id": "query"}))
            assert (await next_event(ws, "pong"))["id"] == "query"
        wrong = "not-the-token-" + "x" * 20
        for connect in (lambda: websockets.connect(url, subprotocols=control_subprotocols(wrong)),
                        lambda: websockets.connect(f"{url}?token={wrong}"),
                        lambda: websockets.connect(url, subprotocols=["avatar.v1"])):
            async with connect() as ws:
                error = await next_event(ws, "error")
                assert error["code"] == "bad_token" and wrong not in error["message"]
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await ws.recv()
                assert closed.value.rcvd.code == 4401
        # The subprotocol wins over a stale query token.
        async with websockets.connect(f"{url}?token={wrong}", subprotocols=control_subprotocols(s["token"])) as ws:
            await ws.send(json.dumps({"type": "ping", "id": "both"}))
            assert (await next_event(ws, "pong"))["id"] == "both"
