"""``avatar serve`` for tests that run the server in its own process on loopback.

aioice leaves 127.0.0.1 out of its host candidates; a server and client on one machine's
loopback need exactly that candidate, so it is the only one offered.
"""

from __future__ import annotations

import sys

import aioice.ice

from server.cli import main

if __name__ == "__main__":
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]
    sys.exit(main(["serve", *sys.argv[1:]]))
