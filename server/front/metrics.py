"""The gateway's Prometheus metrics: per-node sessions, free capacity and deadline misses, placement."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from server.front.backends import Backend


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.node_sessions = Gauge("avatar_node_sessions", "Sessions on each avatar node", ["node"], registry=r)
        self.node_capacity = Gauge(
            "avatar_node_capacity", "More sessions each avatar node can take (its measured capacity)", ["node"],
            registry=r,
        )
        self.node_misses = Gauge(
            "avatar_node_deadline_misses", "Playout deadline misses on each avatar node since it started", ["node"],
            registry=r,
        )
        self.node_alive = Gauge("avatar_node_alive", "1 while the avatar node serves", ["node"], registry=r)
        self.nodes_lost = Counter("avatar_nodes_lost", "Avatar nodes lost with their sessions", registry=r)
        self.sessions_placed = Counter("avatar_sessions_placed", "Sessions created on a node", ["node"], registry=r)
        self.sessions_rejected = Counter(
            "avatar_sessions_rejected", "Session creations the cluster refused", ["reason"], registry=r
        )

    def observe(self, nodes: Iterable[Backend]) -> None:
        """The per-node gauges from the nodes known now (a dropped node's series go)."""
        gauges = (self.node_sessions, self.node_capacity, self.node_misses, self.node_alive)
        for gauge in gauges:
            gauge.clear()
        for n in nodes:
            self.node_sessions.labels(n.node).set(len(n.sessions))
            self.node_capacity.labels(n.node).set(n.capacity)
            self.node_misses.labels(n.node).set(n.misses)
            self.node_alive.labels(n.node).set(1 if n.alive else 0)

    def render(self) -> bytes:
        return generate_latest(self.registry)
