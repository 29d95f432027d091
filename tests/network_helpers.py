"""A bad network between two WebRTC peers on loopback: a UDP relay that loses, delays and reorders.

Each peer is told (in the SDP it receives) that the other sits at one of the relay's two
sockets, so every datagram between them (STUN, DTLS, RTP, RTCP) crosses the relay, which
forwards it after a delay drawn per datagram (datagrams overtake each other when the jitter
exceeds their spacing) or drops it. ``ImpairedPath.set`` changes the conditions at any moment:
the network degrades and recovers while the call runs. (This machine's kernel has no ``netem``
queueing discipline, so the impairment is done in user space.)
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass

CANDIDATE = re.compile(r"(a=candidate:\S+ 1 udp \d+ )127\.0\.0\.1 (\d+)( typ host)")


@dataclass(frozen=True)
class Conditions:
    loss: float = 0.0  # share of datagrams dropped
    delay_s: float = 0.0  # every datagram's base delay ...
    jitter_s: float = 0.0  # ... plus up to this much more, drawn per datagram


class _Side(asyncio.DatagramProtocol):
    def __init__(self, path: ImpairedPath, name: str) -> None:
        self.path, self.name = path, name
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        self.path.forward(self.name, data)


class ImpairedPath:
    """Relay between a client (offerer) and a server; impairs both directions alike."""

    def __init__(self, seed: int = 0) -> None:
        self.conditions = Conditions()
        self.rng = random.Random(seed)
        self.client_addr: tuple[str, int] | None = None
        self.server_addr: tuple[str, int] | None = None
        self.sent = {"up": 0, "down": 0}
        self.dropped = {"up": 0, "down": 0}
        self._to_client: _Side | None = None  # the socket the client sends to (and hears the server from)
        self._to_server: _Side | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        here = ("127.0.0.1", 0)
        _, self._to_client = await loop.create_datagram_endpoint(lambda: _Side(self, "up"), local_addr=here)
        _, self._to_server = await loop.create_datagram_endpoint(lambda: _Side(self, "down"), local_addr=here)

    def close(self) -> None:
        for side in (self._to_client, self._to_server):
            if side is not None and side.transport is not None:
                side.transport.close()

    def set(self, conditions: Conditions) -> None:
        self.conditions = conditions

    def offer_to_server(self, sdp: str) -> str:
        """The client's offer as the server must see it: the client at the relay."""
        self.client_addr = ("127.0.0.1", _port(sdp))
        return _retarget(sdp, self._to_server.transport.get_extra_info("sockname")[1])

    def answer_to_client(self, sdp: str) -> str:
        """The server's answer as the client must see it: the server at the relay."""
        self.server_addr = ("127.0.0.1", _port(sdp))
        return _retarget(sdp, self._to_client.transport.get_extra_info("sockname")[1])

    def forward(self, direction: str, data: bytes) -> None:
        """``up``: from the client, out of the server-facing socket; ``down``: the reverse."""
        out, dest = (self._to_server, self.server_addr) if direction == "up" else (self._to_client, self.client_addr)
        if dest is None or out.transport is None:
            return
        c = self.conditions
        if c.loss and self.rng.random() < c.loss:
            self.dropped[direction] += 1
            return
        self.sent[direction] += 1
        delay = c.delay_s + self.rng.uniform(0.0, c.jitter_s)
        if delay <= 0:
            out.transport.sendto(data, dest)
        else:
            asyncio.get_running_loop().call_later(delay, _send, out, data, dest)


def _send(side: _Side, data: bytes, dest: tuple[str, int]) -> None:
    if side.transport is not None and not side.transport.is_closing():
        side.transport.sendto(data, dest)


def _port(sdp: str) -> int:
    """The port of the first media section's loopback candidate: the one BUNDLE keeps."""
    first = CANDIDATE.search(sdp)
    assert first is not None, "no loopback host candidate"
    return int(first.group(2))


def _retarget(sdp: str, port: int) -> str:
    return CANDIDATE.sub(lambda m: f"{m.group(1)}127.0.0.1 {port}{m.group(3)}", sdp)
