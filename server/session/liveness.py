"""When each step of a session's life happened: what the reaper judges it by, and what the logs report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Liveness:
    """Monotonic instants of one session's life; ``None`` until the step has happened."""

    created_at: float = field(default_factory=time.monotonic)
    offered_at: float | None = None
    viewers_waiting_since: float | None = None  # a WHEP viewer offered and none has connected since
    connected_at: float | None = None
    engine_started_at: float | None = None
    first_frame_at: float | None = None
    last_heard_at: float | None = None  # connection, or the latest inbound media

    def heard(self) -> None:
        self.last_heard_at = time.monotonic()

    def connected(self) -> None:
        self.last_heard_at = self.connected_at = time.monotonic()
