"""Where a new session goes: the serving node with the most free capacity first (a node's web
processes: the one with the fewest sessions); where a personal avatar is enrolled: the node its
name hashes to."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from server.front.backends import Backend


def ranked(nodes: Iterable[Backend]) -> list[Backend]:
    """Serving nodes, most free capacity first (then fewer sessions, then node id, so ties spread
    sessions and the order is stable). Full nodes stay last: their figure may be a poll old."""
    return sorted((n for n in nodes if n.alive), key=lambda n: (-n.capacity, len(n.sessions), n.node))


def spread(nodes: Iterable[Backend]) -> list[Backend]:
    """Serving apps with room, fewest sessions first (then most room, then name), full ones last:
    for a node's web processes, alike and sharing one engine, an even spread of the loop's work."""
    return sorted((n for n in nodes if n.alive), key=lambda n: (n.capacity <= 0, len(n.sessions), -n.capacity, n.node))


def enrolling_node(nodes: Iterable[Backend], name: str) -> Backend | None:
    """The serving node that enrols the personal avatar ``name`` and answers for it: the same one
    for a name while the nodes stay, and only the names of a node that leaves move (rendezvous
    hashing); None when no node serves."""
    serving = [n for n in nodes if n.alive]
    if not serving:
        return None
    return max(serving, key=lambda n: hashlib.sha256(f"{n.node}/{name}".encode()).digest())
