"""The websocket control socket: typed messages in, session events out.

One reader (validates and applies client messages) and one writer (drains the session's
event queue) per socket. Bad input never closes the socket: it gets an ``error`` event (a
message the server fails on gets ``internal_error``, and is logged with its session). Only a
message over the transport's limit (``uvicorn_config.transport_limit``) closes it, with 1009.
Only one control socket per session at a time; the socket closes when the session does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from server.api.control_json import parse
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
    ServerEvent,
    Speak,
    client_message,
)
from server.config import InputLimits
from server.session.events import EventQueue
from server.session.manager import SessionManager
from server.session.session import Session

log = logging.getLogger(__name__)
CLOSE_SESSION_ENDED = 4000
CLOSE_BUSY = 4409
ANSWER_PATIENCE_S = 5.0  # the longest a reader waits for its socket's events to be taken


def close_code(status: int) -> int:
    """HTTP status as a websocket close code in the private range (401 -> 4401)."""
    return 4000 + status


async def serve_control(
    ws: WebSocket,
    manager: SessionManager,
    session_id: str,
    token: str | None,
    metrics: ServerMetrics,
    limits: InputLimits,
    handover_s: float,
    role: str = "control",
) -> None:
    """Serve a session's control socket (or, as ``observer``, a read-only copy of its events); a
    new control socket waits ``handover_s`` for the previous one to finish closing."""
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
            await ObserverConnection(ws, session, queue, MessagePace(limits.control_messages_per_s)).run()
        finally:
            session.events.unobserve(queue)
        return
    try:  # a client reconnecting right after a clean close may arrive before that socket's teardown ends
        await asyncio.wait_for(session.control_lock.acquire(), handover_s)
    except TimeoutError:
        await _refuse(ws, "control_busy", "this session already has a control socket", CLOSE_BUSY)
        return
    try:
        await ControlConnection(ws, session, limits, metrics).run()
    finally:
        session.control_lock.release()


def subprotocol_token(offered: list[str]) -> str | None:
    """The session token a client sent as the ``avatar.token.<token>`` subprotocol, if it did."""
    for protocol in offered:
        if protocol.startswith(TOKEN_SUBPROTOCOL):
            return protocol[len(TOKEN_SUBPROTOCOL):] or None
    return None


async def _refuse(ws: WebSocket, code: str, message: str, close: int) -> None:
    await ws.send_text(ErrorEvent(code=code, message=message).model_dump_json())
    await ws.close(code=close, reason=message[:120])


async def serve_socket(ws: WebSocket, session: Session, read: Coroutine[Any, Any, None],
                       write: Coroutine[Any, Any, None], name: str) -> None:
    """Run a socket's reader and writer until either ends or the session closes (then say why)."""
    tasks = [
        asyncio.create_task(read, name=f"{name}-read"),
        asyncio.create_task(write, name=f"{name}-write"),
        asyncio.create_task(session.wait_closed(), name=f"{name}-session-closed"),
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


async def send_events(ws: WebSocket, next_event: Callable[[], Awaitable[ServerEvent]]) -> None:
    """A socket's writer: each event as it comes, as JSON text."""
    while True:
        event = await next_event()
        await ws.send_text(event.model_dump_json())


async def receive_paced(ws: WebSocket, pace: MessagePace, on_message: Callable[[dict], Awaitable[None]],
                        room: Callable[[float], Awaitable[None]]) -> None:
    """A socket's reader: each message at the pace allowed and once its answers have room (for up to
    ``ANSWER_PATIENCE_S``: a client that reads nothing is read on, its events dropped), until the
    client disconnects."""
    while True:
        await pace.wait()
        await room(ANSWER_PATIENCE_S)
        message = await ws.receive()
        if message["type"] == "websocket.disconnect":
            return
        await on_message(message)


class ControlConnection:
    def __init__(self, ws: WebSocket, session: Session, limits: InputLimits, metrics: ServerMetrics) -> None:
        self.ws = ws
        self.session = session
        self.max_bytes = limits.max_control_bytes
        self.max_depth = limits.max_control_depth
        self.pace = MessagePace(limits.control_messages_per_s)
        self.metrics = metrics
        self._binary_rate: int | None = None  # set by an audio.append that announced a binary message
        self._binary_utterance: str | None = None

    async def run(self) -> None:
        if self.session.started:
            self.session.events.announce_ready()
        read = receive_paced(self.ws, self.pace, self._on_message, self.session.events.room)
        await serve_socket(self.ws, self.session, read, send_events(self.ws, self.session.events.next), "control")

    async def _on_message(self, message: dict) -> None:
        try:
            if message.get("bytes") is not None:
                self._on_binary(message["bytes"])
            else:
                await self._on_text(message.get("text") or "")
        except ControlError as exc:
            self.session.events.emit(ErrorEvent(code=exc.code, message=exc.message))
        except Exception as exc:  # a bug must not end the reader: the socket stays, the message is answered
            log.exception("session %s: control message failed", self.session.id)
            self.session.events.emit(ErrorEvent(code="internal_error",
                                                message=f"the message failed ({exc.__class__.__name__})"))

    def _on_binary(self, data: bytes) -> None:
        rate, self._binary_rate = self._binary_rate, None
        if rate is None:
            raise ControlError("unexpected_binary", "binary audio must follow an audio.append without `audio`")
        if len(data) > self.max_bytes:
            raise ControlError("message_too_large", f"binary message of {len(data)} bytes; limit {self.max_bytes}")
        self.session.append_audio(data, rate, self._binary_utterance)

    async def _on_text(self, text: str) -> None:
        if len(text) > self.max_bytes:
            raise ControlError("message_too_large", f"message of {len(text)} bytes; limit {self.max_bytes}")
        raw = parse(text, self.max_depth)
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
                s.speak(msg.text, msg.utterance_id, msg.voice)
            case AudioAppend(audio=None):
                self._binary_rate = msg.sample_rate
                self._binary_utterance = msg.utterance_id
            case AudioAppend():
                s.append_audio(msg.pcm() or b"", msg.sample_rate, msg.utterance_id)
            case AudioCommit():
                s.commit_audio(msg.utterance_id)
            case Interrupt():
                s.interrupt()
            case Configure():
                s.configure(msg.mode, msg.voice, msg.barge_in, msg.user_audio)
            case Ping():
                s.events.emit(Pong(id=msg.id, server_time=time.time()))


class MessagePace:
    """A token bucket over one socket's messages: ``rate`` a second, bursts of two seconds' worth.
    :meth:`wait` before each read; past the burst the socket is read at ``rate``, so a flooding
    client's own sends back up and the server's work per socket stays bounded."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = 2 * rate
        self._tokens = self.burst
        self._clock = clock
        self._at = clock()

    async def wait(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1:
            await asyncio.sleep((1 - self._tokens) / self.rate)
            self._tokens, self._at = 1.0, self._clock()
        self._tokens -= 1


def _summarize(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "message"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


class ObserverConnection:
    """A read-only socket: every session event, no commands (a viewer beside an agent that has control)."""

    def __init__(self, ws: WebSocket, session: Session, queue: EventQueue, pace: MessagePace) -> None:
        self.ws = ws
        self.session = session
        self.queue = queue
        self.pace = pace

    async def run(self) -> None:
        read = receive_paced(self.ws, self.pace, self._on_message, self.queue.room)
        await serve_socket(self.ws, self.session, read, send_events(self.ws, self.queue.get), "observer")

    async def _on_message(self, message: dict) -> None:
        text = message.get("text") or ""
        try:
            msg = client_message.validate_json(text) if len(text) < 1024 else None
        except ValidationError:
            msg = None
        if isinstance(msg, Ping):
            self.queue.put(Pong(id=msg.id, server_time=time.time()))
        else:
            self.queue.put(ErrorEvent(code="read_only", message="an observer socket takes no commands"))
