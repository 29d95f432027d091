"""What an app tells the front it stands behind (the cluster's gateway, or a node's front): its
sessions, the sessions it can still take, its misses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REPORT_PATH = "/v1/node/report"  # where a node's web process answers its front (with the front's secret)


@dataclass(frozen=True)
class NodeReport:
    """What the gateway learns from a node at each poll."""

    node: str  # the Ray node id, hex
    address: str  # http://ip:port of the node's app, as the gateway reaches it
    sessions: tuple[str, ...]
    capacity: int  # more sessions it takes now: the engine's and its event loop's room, under max_sessions
    misses: float  # playout deadline misses since the node started
    workers_alive: int


def node_report(app: Any, node: str, address: str) -> NodeReport:
    """``app``'s report as the backend ``node`` at ``address``; read on the app's own event loop."""
    manager = app.state.manager
    engine = manager.engine
    capacity = min(engine.capacity(), manager.room()) if engine.available else 0
    cap = manager.settings.engine.max_sessions
    if cap is not None:
        capacity = max(0, min(capacity, cap - len(manager.sessions)))
    misses = app.state.metrics.registry.get_sample_value("avatar_deadline_misses_total") or 0.0
    return NodeReport(
        node=node,
        address=address,
        sessions=tuple(sid for sid, s in manager.sessions.items() if not s.closing),
        capacity=capacity,
        misses=misses,
        workers_alive=sum(1 for w in engine.workers() if w.alive),
    )
