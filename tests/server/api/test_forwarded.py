"""``X-Forwarded-For`` behind a cluster's gateway: trusted only on a request carrying the gateway's
secret, so a client reaching a node's port directly cannot pose as new clients to escape the
per-client limits, while the gateway's requests still count against the clients it names."""

from __future__ import annotations

import pytest
from server_helpers import make_settings, running_server

from server.api.forwarded import GATEWAY_HEADER

pytestmark = pytest.mark.usefixtures("one_thread")
SECRET = "the-gateway's-secret"


async def codes(srv, headers: list[dict[str, str]]) -> list[str]:
    return [(await srv.http.post("/v1/sessions", json={}, headers=h)).json().get("error", {}).get("code", "created")
            for h in headers]


async def test_forwarded_for_counts_only_with_the_gateways_secret():
    """One session held by this machine's address, one place on the server: a request the per-client
    limit stops is ``rate_limited``, one it lets through meets the full server (``at_capacity``)."""
    settings = make_settings(max_sessions=1, client_max_unoffered=1)
    async with running_server(settings, config="puppet") as srv:
        srv.app.state.gateway_secret = SECRET
        assert await codes(srv, [{}]) == ["created"]
        spoofed = [{"X-Forwarded-For": f"203.0.113.{i}"} for i in range(3)]
        wrong = [{"X-Forwarded-For": "198.51.100.7", GATEWAY_HEADER: "guessed"}]
        assert await codes(srv, spoofed + wrong) == ["rate_limited"] * 4  # all 127.0.0.1, whatever they claim
        relayed = [{"X-Forwarded-For": "192.0.2.1", GATEWAY_HEADER: SECRET}]
        assert await codes(srv, relayed) == ["at_capacity"]  # another client, as the gateway names it
