"""``X-Forwarded-For`` behind a cluster's gateway: trusted only on a request carrying the gateway's
secret, so a client reaching a node's port directly cannot pose as new clients to escape the
per-client limits, while the gateway's requests still count against the clients it names."""

from __future__ import annotations

import pytest
from server_helpers import make_settings, running_server

from server.api.forwarded import GATEWAY_HEADER

pytestmark = pytest.mark.usefixtures("one_thread")
SECRET = "the-gateway's-secret"


async def codes(srv, headers: list[dict[str, str]]) -> list[int]:
    return [(await srv.http.post("/v1/sessions", json={}, headers=h)).status_code for h in headers]


async def test_forwarded_for_counts_only_with_the_gateways_secret():
    settings = make_settings(max_sessions=8, client_max_unoffered=2)
    async with running_server(settings, config="puppet") as srv:
        srv.app.state.gateway_secret = SECRET
        spoofed = [{"X-Forwarded-For": f"203.0.113.{i}"} for i in range(3)]
        wrong = [{"X-Forwarded-For": "198.51.100.7", GATEWAY_HEADER: "guessed"}]
        assert await codes(srv, spoofed + wrong) == [201, 201, 429, 429]  # all one client: 127.0.0.1
        relayed = [{"X-Forwarded-For": f"192.0.2.{i}", GATEWAY_HEADER: SECRET} for i in (1, 2, 2, 2)]
        assert await codes(srv, relayed) == [201, 201, 201, 429]  # two clients, as the gateway names them
