"""Where a new session goes: the serving node with the most free capacity first."""

from __future__ import annotations

from collections.abc import Iterable

from server.cluster.membership import ClusterNode


def ranked(nodes: Iterable[ClusterNode]) -> list[ClusterNode]:
    """Serving nodes, most free capacity first (then fewer sessions, then node id, so ties spread
    sessions and the order is stable). Full nodes stay last: their figure may be a poll old."""
    return sorted((n for n in nodes if n.alive), key=lambda n: (-n.capacity, len(n.sessions), n.node))
