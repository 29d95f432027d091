"""Which app behind a front a request goes to: any serving one, the one holding a session, the one
a personal avatar's name hashes to; and which sessions are still waiting for their offer."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from server.base.errors import ApiError
from server.front.backends import Backend, Members
from server.front.metrics import GatewayMetrics
from server.front.placement import enrolling_node


@dataclass
class Routing:
    """``rank`` orders the apps a new session is offered to; ``none_serving`` is the 503 message
    while none serves."""

    membership: Members
    metrics: GatewayMetrics
    rank: Callable[[Iterable[Backend]], list[Backend]]
    none_serving: str
    offered: set[str] = field(default_factory=set)  # sessions whose offer (or WHIP offer) an app has answered

    def any_node(self) -> Backend:
        nodes = self.rank(self.membership.nodes.values())
        if not nodes:
            self.metrics.sessions_rejected.labels("no_nodes").inc()
            raise ApiError(503, "no_nodes", self.none_serving)
        return nodes[0]

    def holder(self, session_id: str) -> Backend:
        node = self.membership.holder(session_id)
        if node is None:
            raise ApiError(404, "unknown_session", f"no session {session_id!r}")
        return node

    def enrolling(self, name: str) -> Backend:
        """The node a personal avatar's name hashes to (its progress is read where it runs); the
        nodes share one store folder (``AVATAR_STORE``), so a stored avatar is every node's."""
        node = enrolling_node(self.membership.nodes.values(), name)
        if node is None:
            raise ApiError(503, "no_nodes", self.none_serving)
        return node

    def waiting_for_offer(self, session_id: str) -> bool:
        return session_id not in self.offered and self.membership.holder(session_id) is not None

    def forget_ended(self) -> None:
        """Sessions no app holds any more leave the offered set."""
        self.offered.intersection_update(sid for node in self.membership.nodes.values() for sid in node.sessions)
