"""Where WebRTC media sockets live: a fixed UDP port range and an announced public address.

Behind a NAT, or in a container on a bridge network, a browser reaches the server's media only on
ports that are forwarded, at the address the outside world sees. aioice binds an ephemeral port on
each interface and announces the interface's own address. :func:`configure` swaps aiortc's ICE
connection for one that binds host candidates inside ``ports`` and announces ``public_address``
in place of the interface's IPv4 address (a 1:1 NAT: the forwarded port equals the bound one).
Server-reflexive (STUN) and relayed (TURN) candidates are gathered as before.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import logging
from dataclasses import dataclass

import aiortc.rtcicetransport
from aioice import Candidate, Connection
from aioice.candidate import candidate_foundation, candidate_priority
from aioice.ice import StunProtocol, server_reflexive_candidate

log = logging.getLogger(__name__)
AIOICE_CONNECTION = Connection
STUN_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class IceNetwork:
    """UDP ports to bind (inclusive; None: any) and the IPv4 address to announce (None: the interface's)."""

    ports: tuple[int, int] | None = None
    public_address: str | None = None

    @classmethod
    def of(cls, ports: tuple[int, int] | None, public_address: ipaddress.IPv4Address | None) -> IceNetwork:
        """From the settings' ``ice_ports`` and ``public_address``."""
        return cls(ports, str(public_address) if public_address is not None else None)

    @property
    def is_default(self) -> bool:
        return self.ports is None and self.public_address is None


def configure(network: IceNetwork) -> None:
    """Every ICE connection made from now on follows ``network``; the default restores aioice's own."""
    if network.is_default:
        aiortc.rtcicetransport.Connection = AIOICE_CONNECTION
        return
    ports = itertools.cycle(range(network.ports[0], network.ports[1] + 1)) if network.ports else None
    aiortc.rtcicetransport.Connection = type(
        "PlacedConnection", (PlacedConnection,), {"network": network, "next_ports": ports}
    )


class PlacedConnection(Connection):
    """An aioice connection whose host candidates sit on ``network``; made by :func:`configure`."""

    network: IceNetwork
    next_ports: itertools.cycle | None  # shared by all connections: successive peers try successive ports

    async def get_component_candidates(
        self, component: int, addresses: list[str], timeout: int = 5
    ) -> list[Candidate]:
        if self.next_ports is None:
            candidates = await super().get_component_candidates(component, addresses, timeout)
        else:
            hosts = [p for p in [await self._bind(component, a) for a in addresses] if p is not None]
            self._protocols += hosts  # aioice pairs remote candidates with every protocol it holds
            candidates = [p.local_candidate for p in hosts] + await self._reflexive(hosts)
            candidates += await super().get_component_candidates(component, [], timeout)  # TURN relays
        return [self._announce(c) for c in candidates]

    async def _bind(self, component: int, address: str) -> StunProtocol | None:
        """A UDP socket on ``address`` at the next free port of the range (None: all taken)."""
        loop = asyncio.get_running_loop()
        low, high = self.network.ports
        for _ in range(high - low + 1):
            port = next(self.next_ports)
            try:
                _, protocol = await loop.create_datagram_endpoint(
                    lambda: StunProtocol(self), local_addr=(address, port)
                )
            except OSError:
                continue
            protocol.local_candidate = Candidate(
                foundation=candidate_foundation("host", "udp", address),
                component=component,
                transport="udp",
                priority=candidate_priority(component, "host"),
                host=address,
                port=port,
                type="host",
            )
            return protocol
        log.warning("no free UDP port in %d-%d on %s: no candidate there", low, high, address)
        return None

    async def _reflexive(self, hosts: list[StunProtocol]) -> list[Candidate]:
        if self.stun_server is None:
            return []
        ipv4 = [p for p in hosts if ipaddress.ip_address(p.local_candidate.host).version == 4]
        tasks = [asyncio.ensure_future(server_reflexive_candidate(p, self.stun_server)) for p in ipv4]
        if not tasks:
            return []
        done, pending = await asyncio.wait(tasks, timeout=STUN_TIMEOUT_S)
        for task in pending:
            task.cancel()
        return [t.result()[0] for t in done if t.exception() is None]

    def _announce(self, candidate: Candidate) -> Candidate:
        """A host IPv4 candidate is announced at the public address (its base stays the bound socket)."""
        public = self.network.public_address
        if public is not None and candidate.type == "host" and ipaddress.ip_address(candidate.host).version == 4:
            candidate.host = public
        return candidate
