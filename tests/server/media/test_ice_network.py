"""ICE placement for NAT and containers: host candidates bound inside ``AVATAR_ICE_PORTS`` and announced
at ``AVATAR_PUBLIC_ADDRESS``; peers placed so still connect (on loopback)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from server_helpers import loopback_only, wait_until

from server.config import Settings
from server.media import ice_network
from server.media.ice_network import IceNetwork

PORTS = (47_310, 47_319)
CANDIDATE = re.compile(r"a=candidate:\S+ 1 udp \d+ (\S+) (\d+) typ host")


@pytest.fixture
def placed(monkeypatch) -> Iterator[None]:
    loopback_only(monkeypatch)
    yield
    ice_network.configure(IceNetwork())


def host_candidates(sdp: str) -> list[tuple[str, int]]:
    return [(host, int(port)) for host, port in CANDIDATE.findall(sdp)]


async def offer_sdp() -> str:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.createDataChannel("probe")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    return sdp


def test_settings_parse_the_range_and_address():
    settings = Settings.from_env({"AVATAR_ICE_PORTS": "40000-40049", "AVATAR_PUBLIC_ADDRESS": "203.0.113.7"})
    network = settings.network
    assert IceNetwork.of(network.ice_ports, network.public_address) == IceNetwork((40000, 40049), "203.0.113.7")
    default = Settings.from_env({})
    assert IceNetwork.of(default.network.ice_ports, default.network.public_address).is_default
    for bad in ("40000", "50000-40000", "80-90", "a-b"):
        with pytest.raises(ValueError):
            Settings.from_env({"AVATAR_ICE_PORTS": bad})
    with pytest.raises(ValueError):
        Settings.from_env({"AVATAR_PUBLIC_ADDRESS": "not-an-address"})


async def test_candidates_sit_in_the_range_and_announce_the_public_address(placed):
    ice_network.configure(IceNetwork(PORTS, "203.0.113.7"))
    first, second = host_candidates(await offer_sdp()), host_candidates(await offer_sdp())
    assert [h for h, _ in first + second] == ["203.0.113.7", "203.0.113.7"]
    ports = [p for _, p in first + second]
    assert all(PORTS[0] <= p <= PORTS[1] for p in ports) and ports[0] != ports[1]
    ice_network.configure(IceNetwork())
    (host, port), = host_candidates(await offer_sdp())
    assert host == "127.0.0.1" and not PORTS[0] <= port <= PORTS[1]


async def test_placed_peers_connect_and_a_full_range_leaves_no_candidate(placed):
    ice_network.configure(IceNetwork((PORTS[0], PORTS[0] + 1), "127.0.0.1"))
    a, b = RTCPeerConnection(RTCConfiguration(iceServers=[])), RTCPeerConnection(RTCConfiguration(iceServers=[]))
    channel = a.createDataChannel("probe")
    got: list[str] = []
    b.on("datachannel", lambda ch: ch.on("message", got.append))
    await a.setLocalDescription(await a.createOffer())
    await b.setRemoteDescription(a.localDescription)
    await b.setLocalDescription(await b.createAnswer())
    await a.setRemoteDescription(b.localDescription)
    assert await wait_until(lambda: a.connectionState == b.connectionState == "connected", 10)
    channel.send("hello")
    assert await wait_until(lambda: got == ["hello"], 5)
    used = {p for _, p in host_candidates(a.localDescription.sdp) + host_candidates(b.localDescription.sdp)}
    assert used == {PORTS[0], PORTS[0] + 1}
    assert host_candidates(await offer_sdp()) == []  # both ports are taken
    await asyncio.gather(a.close(), b.close())
