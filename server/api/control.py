"""The websocket control socket: typed messages in, session events out.

One reader (validates and applies client messages) and one writer (drains the session's
event queue) per socket. Bad input never closes the socket: it gets an ``error`` event.
Only one control socket per session at a time; the socket closes when the session does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Coroutine
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from server.base.errors import ApiError, ControlError
from server.base.metrics import ServerMetrics
from server.base.protocol import (
    CONTROL_SUBPROTOCOL,
    TOKEN_SUBPROTOCOL,
    AudioAppend,
    AudioCommit,
    ClientMessage,
    Configure,
    ErrorEvent,
    Interrupt,
    Ping,
    Pong,
    Speak,
    client_message,
)
from server.session.events import EventQueue
from server.session.manager import SessionManager
from server.session.session import AvatarSession

CLOSE_SESSION_ENDED = 4000
CLOSE_BUSY = 4409


def close_code(status: int) -> int:
    """HTTP status as a websocket close code in the private range (401 -> 4401)."""
    return 4000 + status


async def serve_control(
    ws: WebSocket,
    manager: SessionManager,
    session_id: str,
    token: str | None,
    metrics: ServerMetrics,
    role: str = "control",
) -> None:
    offered = ws.scope.get("subprotocols") or []
    await ws.accept(subprotocol=CONTROL_SUBPROTOCOL if CONTROL_SUBPROTOCOL in offered else None)
    try:
        session = manager.get(session_id, subprotocol_token(offered) or token)
    except ApiError as exc:
        await _refuse(ws, exc.code, exc.message, close_code(exc.status))
        return
    if role == "observer":
        queue = session.events.observe()
        if queue is None:
            await _refuse(ws, "control_busy", "this session has as many observers as it takes", CLOSE_BUSY)
            return
        try:
            await ObserverConnection(ws, session, queue).run()
        finally:
            session.events.unobserve(queue)
        return
    if session.control_attached:
        await _refuse(ws, "control_busy", "this session already has a control socket", CLOSE_BUSY)
        return
    session.control_attached = True
    try:
        await ControlConnection(ws, session, manager.settings.max_control_bytes, metrics).run()
    finally:
        session.control_attached = False


def subprotocol_token(offered: list[str]) -> str | None:
    """The session token a client sent as the ``avatar.token.<token>`` subprotocol, if it did."""
    for protocol in offered:
        if protocol.startswith(TOKEN_SUBPROTOCOL):
            return protocol[len(TOKEN_SUBPROTOCOL):] or None
    return None


async def _refuse(ws: WebSocket, code: str, message: str, close: int) -> None:
    await ws.send_text(ErrorEvent(code=code, message=message).model_dump_json())
    await ws.close(code=close, reason=message[:120])


async def serve_socket(ws: WebSocket, session: AvatarSession, read: Coroutine[Any, Any, None],
                       write: Coroutine[Any, Any, None], name: str) -> None:
    """Run a socket's reader and writer until either ends or the session closes (then say why)."""
    tasks = [
        asyncio.create_task(read, name=f"{name}-read"),
        asyncio.create_task(write, name=f"{name}-write"),
        asyncio.create_task(session.closed.wait(), name=f"{name}-session-closed"),
    ]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if tasks[2] in done:
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await ws.close(code=CLOSE_SESSION_ENDED, reason=f"session ended: {session.close_reason}")


class ControlConnection:
    def __init__(self, ws: WebSocket, session: AvatarSession, max_bytes: int, metrics: ServerMetrics) -> None:
        self.ws = ws
        self.session = session
        self.max_bytes = max_bytes
        self.metrics = metrics
        self._binary_rate: int | None = None  # set by an audio.append that announced a binary message
        self._binary_utterance: str | None = None

    async def run(self) -> None:
        await serve_socket(self.ws, self.session, self._read(), self._write(), "control")

    async def _write(self) -> None:
        if self.session.started.is_set():
            self.session.events.announce_ready()
        while True:
            event = await self.session.events.next()
            await self.ws.send_text(event.model_dump_json())

    async def _read(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            try:
                if message.get("bytes") is not None:
                    self._on_binary(message["bytes"])
                else:
                    await self._on_text(message.get("text") or "")
            except ControlError as exc:
                self.session.events.emit(ErrorEvent(code=exc.code, message=exc.message))

    def _on_binary(self, data: bytes) -> None:
        rate, self._binary_rate = self._binary_rate, None
        if rate is None:
            raise ControlError("unexpected_binary", "binary audio must follow an audio.append without `audio`")
        if len(data) > self.max_bytes:
            raise ControlError("message_too_large", f"binary message of {len(data)} bytes; limit {self.max_bytes}")
        self.session.voice.append_audio(data, rate, self._binary_utterance)

    async def _on_text(self, text: str) -> None:
        if len(text) > self.max_bytes:
            raise ControlError("message_too_large", f"message of {len(text)} bytes; limit {self.max_bytes}")
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ControlError("bad_json", f"not JSON: {exc.msg} at position {exc.pos}") from exc
        try:
            msg: ClientMessage = client_message.validate_python(raw)
        except ValidationError as exc:
            raise ControlError("bad_message", _summarize(exc)) from exc
        self.metrics.control_messages.labels(msg.type).inc()
        await self._apply(msg)

    async def _apply(self, msg: ClientMessage) -> None:
        s = self.session
        match msg:
            case Speak():
                s.voice.speak(msg.text, msg.utterance_id, msg.voice)
            case AudioAppend(audio=None):
                self._binary_rate = msg.sample_rate
                self._binary_utterance = msg.utterance_id
            case AudioAppend():
                s.voice.append_audio(msg.pcm() or b"", msg.sample_rate, msg.utterance_id)
            case AudioCommit():
                s.voice.commit_audio(msg.utterance_id)
            case Interrupt():
                s.voice.interrupt()
            case Configure():
                s.configure(msg.mode, msg.voice, msg.barge_in, msg.user_audio)
            case Ping():
                s.events.emit(Pong(id=msg.id, server_time=time.time()))


def _summarize(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "message"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


class ObserverConnection:
    """A read-only socket: every session event, no commands (a viewer beside an agent that has control)."""

    def __init__(self, ws: WebSocket, session: AvatarSession, queue: EventQueue) -> None:
        self.ws = ws
        self.session = session
        self.queue = queue

    async def run(self) -> None:
        await serve_socket(self.ws, self.session, self._read(), self._write(), "observer")

    async def _write(self) -> None:
        while True:
            event = await self.queue.get()
            await self.ws.send_text(event.model_dump_json())

    async def _read(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text") or ""
            try:
                msg = client_message.validate_json(text) if len(text) < 1024 else None
            except ValidationError:
                msg = None
            if isinstance(msg, Ping):
                self.queue.put(Pong(id=msg.id, server_time=time.time()))
            else:
                self.queue.put(ErrorEvent(code="read_only", message="an observer socket takes no commands"))
