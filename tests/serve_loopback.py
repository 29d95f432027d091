"""``avatar serve`` for tests that run the server in its own process on loopback.

aioice leaves 127.0.0.1 out of its host candidates; a server and client on one machine's
loopback need exactly that candidate, so it is the only one offered (by a node's web processes too).
"""

from __future__ import annotations

import sys

import aioice.ice

from server.cli import main
from server.node import web_process

if __name__ == "__main__":
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]
    web_process.HOST_ADDRESSES = ["127.0.0.1"]
    sys.exit(main(["serve", *sys.argv[1:]]))
