"""The gateway's pure parts: what nodes run with, placement order, the session map between reports."""

from __future__ import annotations

import time

import pytest

from server.api.report import NodeReport
from server.cluster.join import ClusterUnreachable, join
from server.cluster.node_settings import node_settings, passed_to_nodes
from server.config import Settings
from server.front.backends import Backend
from server.front.placement import enrolling_node, ranked


def test_nodes_run_the_gateways_settings_under_their_own_environment():
    gateway = Settings.from_env({"AVATAR_PUBLIC_ADDRESS": "203.0.113.7", "AVATAR_ICE_SERVERS": "stun:stun.example:3478",
                                 "AVATAR_AUTH_TOKEN": "t0ken"}, config="puppet", host="0.0.0.0", port=9000)
    passed = passed_to_nodes(gateway)
    assert "host" not in passed and "port" not in passed
    plain = node_settings(passed, {}, "10.1.2.3")
    assert (plain.network.host, plain.network.port) == ("10.1.2.3", 0)
    assert (plain.engine.config, plain.access.auth_token) == ("puppet", "t0ken")
    assert str(plain.network.public_address) == "203.0.113.7"
    assert plain.network.ice_servers[0].urls == ["stun:stun.example:3478"]
    own = node_settings(passed, {"AVATAR_PUBLIC_ADDRESS": "198.51.100.2", "AVATAR_ICE_PORTS": "40000-40009",
                                 "AVATAR_ICE_SERVERS": "turn:u:p@turn.example:3478", "AVATAR_HOST": "0.0.0.0",
                                 "AVATAR_PORT": "8080"}, "10.1.2.3")
    assert str(own.network.public_address) == "198.51.100.2" and own.network.ice_ports == (40000, 40009)
    assert own.network.ice_servers[0].username == "u" and own.network.ice_servers[0].urls == ["turn:turn.example:3478"]
    assert (own.network.host, own.network.port, own.engine.config) == ("0.0.0.0", 8080, "puppet")
    with pytest.raises(ValueError):
        node_settings(passed, {"AVATAR_ICE_PORTS": "nonsense"}, "10.1.2.3")


def _node(node_id: str, capacity: int, sessions: int = 0, alive: bool = True) -> Backend:
    return Backend(node_id, alive=alive, capacity=capacity, sessions={f"{node_id}-{i}" for i in range(sessions)})


def test_placement_prefers_free_capacity_then_fewer_sessions_and_skips_nodes_not_serving():
    nodes = [_node("a", 1, 3), _node("b", 4), _node("c", 1, 1), _node("d", 9, alive=False), _node("e", 0)]
    assert [n.node for n in ranked(nodes)] == ["b", "c", "a", "e"]
    assert ranked([_node("d", 9, alive=False)]) == []


def test_a_personal_avatar_is_enrolled_on_the_node_its_name_hashes_to():
    nodes = [_node(f"n{i}", 1) for i in range(4)]
    names = [f"person{i}" for i in range(200)]
    chosen = {name: enrolling_node(nodes, name).node for name in names}
    assert all(enrolling_node(list(reversed(nodes)), n).node == chosen[n] for n in names)  # order does not matter
    counts = [list(chosen.values()).count(n.node) for n in nodes]
    assert min(counts) > 20, counts  # spread over the nodes
    # A node leaving moves only its own names; nodes not serving are skipped.
    gone = nodes[1:]
    assert all(enrolling_node(gone, n).node == chosen[n] for n in names if chosen[n] != "n0")
    assert enrolling_node([_node("x", 1, alive=False)], "me") is None


def test_sessions_placed_after_a_report_was_asked_for_survive_that_report():
    node = Backend("n", alive=True, capacity=3)
    asked = time.monotonic()
    node.placed("s_new")
    assert node.capacity == 2 and "s_new" in node.sessions
    report = NodeReport(node="n", address="http://10.0.0.5:4242", sessions=("s_old",), capacity=3, misses=4.0,
                        workers_alive=1)
    node.update(report, asked)
    assert node.sessions == {"s_old", "s_new"} and node.capacity == 2
    node.update(report, time.monotonic())  # a later report that does not list it: it ended
    assert node.sessions == {"s_old"} and node.capacity == 3
    assert (node.address, node.ws_address, node.misses) == ("http://10.0.0.5:4242", "ws://10.0.0.5:4242", 4.0)
    node.update(NodeReport("n", node.address, (), 0, 0.0, workers_alive=0), time.monotonic())
    assert not node.alive and node.error


@pytest.mark.parametrize("address", ["localhost", "host:", ":6379", "host:port", "host:70000"])
def test_a_malformed_ray_address_is_refused_before_any_connection(address):
    with pytest.raises(ClusterUnreachable, match="bad Ray address"):
        join(address)
