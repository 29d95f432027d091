"""What a server process sets up once, for every app it runs: no app factory changes the process.

What is process-wide: the log filter that keeps tokens out of log lines, the class aiortc makes
its ICE connections from (bound to the UDP port range and announcing the public address the
settings name, :mod:`server.media.ice_network`), and, where asked (one machine's tests), the host
addresses aioice offers as candidates. :func:`prepare_process` sets them;
``avatar serve``, a node's web process, a cluster node and the tests' server helpers call it
before they serve. Calling it again is harmless: the filter is installed once, the ICE class is
the settings' (the default restores aioice's own).
"""

from __future__ import annotations

import aioice.ice

from server.api.redact import install_redaction
from server.config import NetworkSettings
from server.media import ice_network


def prepare_process(network: NetworkSettings, host_addresses: list[str] | None = None) -> None:
    """Tokens redacted from log lines; ICE connections on ``network``'s ports and public address,
    their host candidates on ``host_addresses`` (None: aioice's own, every interface)."""
    install_redaction()
    ice_network.configure(ice_network.IceNetwork.of(network.ice_ports, network.public_address))
    if host_addresses is not None:
        addresses = list(host_addresses)
        aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: addresses
