"""Read deadlines for HTTP requests, so that a client sending a byte at a time cannot hold a
connection (and its descriptor and buffers) for as long as it likes.

uvicorn bounds how long an idle keep-alive connection stays open, but any byte received resets
that clock, and nothing bounds how long a request's line and headers or its body take to arrive.
Here the first byte of a request starts a clock: its line and headers must be in within
``header_timeout_s`` (else the client gets ``408 request_timeout`` and the connection closes),
and its body within ``body_timeout_s`` after them (else the connection closes, and the handler
reading the body sees the client gone). Websocket upgrades leave these clocks behind: the control
socket's own heartbeat watches those.
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

_BODY = json.dumps({"error": {"code": "request_timeout",
                              "message": "the request's line and headers took too long to arrive"}}).encode()
TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                    b"content-length: " + str(len(_BODY)).encode() + b"\r\nconnection: close\r\n\r\n" + _BODY)


class ReadDeadlines:
    """Mixed into uvicorn's HTTP protocol class (httptools or h11: both keep the request in
    flight as ``self.cycle``, with ``more_body`` until its body is in)."""

    header_timeout_s: float
    body_timeout_s: float

    def connection_made(self, transport: asyncio.Transport) -> None:
        self._timer: asyncio.TimerHandle | None = None
        self._phase: str | None = None  # "headers" or "body": what the running clock waits for
        self._before = None  # the request in flight when the headers clock started
        super().connection_made(transport)
        self._await_headers()

    def data_received(self, data: bytes) -> None:
        if self._phase is None and (self.cycle is None or self.cycle.response_complete):
            self._await_headers()  # the first byte of the next request on this connection
        super().data_received(data)
        if self.transport.get_protocol() is not self:  # upgraded to a websocket
            self._stop()
        elif self._phase == "headers" and self.cycle is not self._before:
            self._stop()
            if self.cycle.more_body:
                self._start("body", self.body_timeout_s)
        elif self._phase == "body" and not self.cycle.more_body:
            self._stop()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        super().connection_lost(exc)

    def _await_headers(self) -> None:
        self._before = self.cycle
        self._start("headers", self.header_timeout_s)

    def _start(self, phase: str, timeout_s: float) -> None:
        self._phase = phase
        self._timer = asyncio.get_running_loop().call_later(timeout_s, self._expired)

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._phase = None, None

    def _expired(self) -> None:
        if self._phase == "headers" and not self.transport.is_closing():
            self.transport.write(TIMEOUT_RESPONSE)
        self._timer, self._phase = None, None
        self.transport.close()


def protocol_class(header_timeout_s: float, body_timeout_s: float, http: str = "auto") -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class (``http``: auto, httptools or h11) with read deadlines."""
    base = import_from_string(HTTP_PROTOCOLS[http])  # auto: the fastest one installed
    return type(f"Deadline{base.__name__}", (ReadDeadlines, base),
                {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s})
