"""Websocket keepalive that never drops a client for the server's own backlog.

The server reads a control socket at a bounded pace (``MessagePace``): a client that sends faster
is slowed, its messages waiting in the socket. uvicorn's keepalive pings that client and drops it
if the pong is not read within ``ws_ping_timeout``, but the pong sits behind those unread
messages, so a client that is only busy was cut off (``1011 keepalive ping timeout``). Here the
pong deadline is extended while the client takes what the server sends it (the socket is
writable) and the server itself holds unread messages of that client, or has received anything
from it since the deadline was set: a client that sends and reads is alive. A client that sends
nothing and answers no ping, or one that no longer reads (its answers pile up unsent: a host gone,
or a flood that never reads), is dropped after the timeout.
"""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol


class PatientKeepalive(WebSocketsSansIOProtocol):
    """uvicorn's websocket protocol, its pong deadline judged against the client's traffic."""

    _heard_at = 0.0  # loop time data last arrived from the client
    _armed_at = 0.0  # loop time the running pong deadline was set

    def data_received(self, data: bytes) -> None:
        self._heard_at = self.loop.time()
        super().data_received(data)

    def send_keepalive_ping(self) -> None:
        super().send_keepalive_ping()
        self._armed_at = self.loop.time()

    def keepalive_timeout(self) -> None:
        if self.writable.is_set() and (self.read_paused or self._heard_at > self._armed_at):
            self._armed_at = self.loop.time()  # still waiting for the pong: it is behind the client's messages
            self.pong_timer = self.loop.call_later(self.ping_timeout, self.keepalive_timeout)
            return
        super().keepalive_timeout()
        if not self.writable.is_set():  # a close frame behind unsent data would wait for a reader for good
            self.transport.abort()
