"""The apps behind a front: each serves its own sessions; the front learns them from its reports."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from server.api.report import NodeReport


@dataclass
class Backend:
    """One app the front routes to (a Ray avatar node, or one of a node's web processes);
    ``capacity`` is its free capacity as last reported, less sessions placed since."""

    node: str
    gpus: float = 0.0
    actor: Any = None
    address: str = ""
    alive: bool = False
    sessions: set[str] = field(default_factory=set)
    capacity: int = 0
    misses: float = 0.0
    reports: int = 0  # reports taken from the node so far
    error: str | None = None
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    poke: asyncio.Event = field(default_factory=asyncio.Event)
    _placed: dict[str, float] = field(default_factory=dict)

    @property
    def ws_address(self) -> str:
        return "ws" + self.address[len("http"):]

    def placed(self, session_id: str) -> None:
        """A session was just created here: count it before the next report does."""
        self.sessions.add(session_id)
        self._placed[session_id] = time.monotonic()
        self.capacity = max(0, self.capacity - 1)

    def update(self, report: NodeReport, asked_at: float) -> None:
        """Take a report asked for at ``asked_at``; sessions placed after that are not in it yet."""
        self._placed = {s: t for s, t in self._placed.items() if t >= asked_at}
        self.sessions = set(report.sessions) | set(self._placed)
        self.capacity = max(0, report.capacity - len(self._placed))
        self.misses = report.misses
        self.reports += 1
        self.address = report.address
        self.alive = report.workers_alive > 0
        self.error = None if self.alive else "no engine worker runs on this node"

    def json(self) -> dict:
        return {"node": self.node, "address": self.address, "alive": self.alive, "sessions": len(self.sessions),
                "capacity": self.capacity, "misses": self.misses, "reports": self.reports, "error": self.error}


class Members(Protocol):
    """The apps a front routes to, kept current by :meth:`run` until it is cancelled."""

    secret: str  # proves the front's requests to its apps (GATEWAY_HEADER)
    nodes: dict[str, Backend]  # the apps serving now, by name

    def listing(self) -> list[Backend]:
        """Every app, serving or not."""

    def holder(self, session_id: str) -> Backend | None: ...

    async def run(self) -> None: ...
