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

    def offered(self) -> None:
        self.offered_at = time.monotonic()

    def engine_started(self) -> None:
        self.engine_started_at = time.monotonic()

    def viewer_offered(self) -> None:
        """A WHEP viewer offered: the wait for one to connect starts, unless it runs already."""
        if self.viewers_waiting_since is None:
            self.viewers_waiting_since = time.monotonic()

    def viewer_connected(self) -> None:
        self.viewers_waiting_since = None

    def first_frame(self) -> float | None:
        """A frame played: the instant noted and returned if it is the first since the offer, else None."""
        if self.first_frame_at is not None or self.offered_at is None:
            return None
        self.first_frame_at = time.monotonic()
        return self.first_frame_at
