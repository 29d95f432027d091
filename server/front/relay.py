"""The control websocket through the gateway, relayed message by message to the session's node.

The gateway opens the node's socket first (offering the client's subprotocols, so the token may ride
in one) and accepts the client with the subprotocol the node chose; then text and binary messages
are copied both ways and the node's close code is passed on. When the node is lost the gateway sends
``error`` ``node_lost`` itself. A node socket that drops without a close frame usually means the
node died: the gateway checks the node at once and waits for that verdict before closing. The
gateway sends the node no keepalive pings: the node reads a busy client's messages at its own pace,
so a ping would wait behind them; the node pings the gateway instead (answered at once, as the
gateway reads the node's events as they come), and a node that dies is found by the membership.
"""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from server.base.protocol import CONTROL_SUBPROTOCOL, ErrorEvent
from server.front.backends import Backend

CLOSE_SESSION_ENDED = 4000
CLOSE_UNKNOWN_SESSION = 4404
CLOSE_NODE_UNREACHABLE = 4502
ABNORMAL = 1006  # the node's socket ended without a close frame
VERDICT_S = 10.0  # longest wait for a dropped node to be declared lost
OPEN_TIMEOUT_S = 5.0


async def relay_control(ws: WebSocket, node: Backend | None, session_id: str, max_bytes: int) -> None:
    offered = ws.scope.get("subprotocols") or []
    if node is None:
        await _refuse(ws, offered, "unknown_session", f"no session {session_id!r}", CLOSE_UNKNOWN_SESSION)
        return
    url = node.ws_address + ws.url.path + (f"?{ws.url.query}" if ws.url.query else "")
    try:
        upstream = await connect(url, subprotocols=offered or None, max_size=max_bytes, open_timeout=OPEN_TIMEOUT_S,
                                 ping_interval=None)
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        node.poke.set()
        await _refuse(ws, offered, "node_unreachable", f"the session's node did not answer: {exc}",
                      CLOSE_NODE_UNREACHABLE)
        return
    async with upstream:
        await ws.accept(subprotocol=upstream.subprotocol)
        await _relay(ws, upstream, node)


async def _relay(ws: WebSocket, upstream: ClientConnection, node: Backend) -> None:
    down = asyncio.create_task(_to_client(upstream, ws), name="relay-down")
    up = asyncio.create_task(_to_node(ws, upstream), name="relay-up")
    lost = asyncio.create_task(node.lost.wait(), name="relay-node-lost")
    tasks = {down, up, lost}
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if up in done and up.result() == "client":
            return  # the client left; closing ``upstream`` tells the node
        if not node.lost.is_set() and upstream.close_code in (None, ABNORMAL):
            node.poke.set()
            await asyncio.wait({lost, up}, timeout=VERDICT_S, return_when=asyncio.FIRST_COMPLETED)
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            if node.lost.is_set():
                event = ErrorEvent(code="node_lost", message="the node holding this session was lost")
                await ws.send_text(event.model_dump_json())
                await ws.close(code=CLOSE_SESSION_ENDED, reason="session ended: node_lost")
            else:
                code = upstream.close_code
                await ws.close(code=1011 if code in (None, ABNORMAL) else code, reason=upstream.close_reason or "")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _to_client(upstream: ClientConnection, ws: WebSocket) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for message in upstream:
            if isinstance(message, str):
                await ws.send_text(message)
            else:
                await ws.send_bytes(message)


async def _to_node(ws: WebSocket, upstream: ClientConnection) -> str:
    """Client messages to the node; which side ended it: ``client`` or ``node``."""
    while True:
        message = await ws.receive()
        if message["type"] == "websocket.disconnect":
            return "client"
        try:
            if message.get("bytes") is not None:
                await upstream.send(message["bytes"])
            else:
                await upstream.send(message.get("text") or "")
        except ConnectionClosed:
            return "node"


async def _refuse(ws: WebSocket, offered: list[str], code: str, message: str, close: int) -> None:
    await ws.accept(subprotocol=CONTROL_SUBPROTOCOL if CONTROL_SUBPROTOCOL in offered else None)
    await ws.send_text(ErrorEvent(code=code, message=message).model_dump_json())
    await ws.close(code=close, reason=message[:120])
