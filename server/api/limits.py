"""Per-client limits on session creation, so that one client cannot hold every capacity slot.

A created session holds a slot until it is offered or reaped, so a loop that creates sessions and
never offers keeps the server full for everyone else. Each client (its address, or its bearer
token when the server requires one) may create ``per_minute`` sessions in any 60 s and hold
``max_unoffered`` sessions that have not offered yet. Defaults are far above what a person at a
page does and far below what a loop does. Pure: the clock and "is this session still waiting
for its offer" are passed in.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from starlette.requests import Request

from server.base.errors import ApiError
from server.config import AccessSettings

WINDOW_S = 60.0
PRUNE_AT = 1024  # clients tracked before idle ones are dropped (then twice as many as remain)


@dataclass(frozen=True)
class Refusal:
    """Why a client may not create a session now, and when it may."""

    message: str
    retry_after_s: int


def bearer(request: Request) -> str | None:
    """The request's bearer token, if it has one."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return (value.strip() or None) if scheme.lower() == "bearer" else None


def client_key(address: str | None, token: str | None) -> str:
    """Whom a request counts against: the token when auth is on (hashed: no secret is kept), else the address."""
    if token is not None:
        return "token:" + hashlib.sha256(token.encode()).hexdigest()[:16]
    return "addr:" + (address or "unknown")


def check_token(request: Request, token: str | None, refusal: str) -> None:
    """``401 bad_token`` (saying ``refusal``) unless the server needs no token or ``request`` bears it."""
    if token is not None and bearer(request) != token:
        raise ApiError(401, "bad_token", refusal)


def client_of(request: Request, token: str | None) -> str:
    """Whom ``request`` counts against, on a server whose token is ``token``."""
    return client_key(request.client.host if request.client else None, bearer(request) if token is not None else None)


@dataclass
class _Client:
    created: deque[float] = field(default_factory=deque)  # creation times within the window
    unoffered: dict[str, float] = field(default_factory=dict)  # session id -> creation time
    creating: int = 0  # admitted, not yet settled: concurrent requests count before they finish

    def expire(self, now: float) -> None:
        while self.created and self.created[0] <= now - WINDOW_S:
            self.created.popleft()


class ClientLimits:
    def __init__(self, per_minute: int, max_unoffered: int, offer_timeout_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.max_unoffered = max_unoffered
        self.offer_timeout_s = offer_timeout_s
        self._clock = clock
        self._clients: dict[str, _Client] = {}
        self._prune_at = PRUNE_AT

    @classmethod
    def of(cls, access: AccessSettings, offer_timeout_s: float) -> ClientLimits:
        """The limits ``access`` gives each client, whose sessions wait ``offer_timeout_s`` for their offer."""
        return cls(access.client_sessions_per_minute, access.client_max_unoffered, offer_timeout_s)

    def admit(self, key: str, waiting: Callable[[str], bool]) -> Refusal | None:
        """Admit one creation for ``key`` (counted from now on; :meth:`settle` it), or say why not.

        ``waiting(session_id)`` tells whether a session of this client still waits for its offer.
        """
        now = self._clock()
        if len(self._clients) >= self._prune_at:
            self.forget_idle()
            self._prune_at = max(PRUNE_AT, 2 * len(self._clients))
        client = self._clients.setdefault(key, _Client())
        client.expire(now)
        client.unoffered = {sid: t for sid, t in client.unoffered.items() if waiting(sid)}
        if len(client.created) >= self.per_minute:
            wait = client.created[0] + WINDOW_S - now
            return Refusal(f"too many sessions created: at most {self.per_minute} a minute per client",
                           _seconds(wait))
        held = len(client.unoffered) + client.creating
        if held >= self.max_unoffered:
            oldest = min(client.unoffered.values(), default=now)
            return Refusal(f"{held} sessions of this client are waiting for their offer "
                           f"(at most {self.max_unoffered}); offer or delete one first",
                           _seconds(oldest + self.offer_timeout_s - now))
        client.created.append(now)
        client.creating += 1
        return None

    def settle(self, key: str, session_id: str | None) -> None:
        """An admitted creation finished: ``session_id`` now waits for its offer (None: it failed)."""
        client = self._clients.setdefault(key, _Client())
        client.creating = max(0, client.creating - 1)
        if session_id is not None:
            client.unoffered[session_id] = self._clock()

    @contextlib.contextmanager
    def admitted(self, key: str, waiting: Callable[[str], bool],
                 on_refused: Callable[[], None] | None = None) -> Iterator[Callable[[str], None]]:
        """Around one creation: ``429 rate_limited`` (with Retry-After; ``on_refused`` is told) if
        refused; the block calls what it is given with the new session's id, and the creation is
        settled however it ends."""
        refusal = self.admit(key, waiting)
        if refusal is not None:
            if on_refused is not None:
                on_refused()
            raise ApiError(429, "rate_limited", refusal.message, retry_after=refusal.retry_after_s)
        created: list[str] = []
        try:
            yield created.append
        finally:
            self.settle(key, created[0] if created else None)

    def forget_idle(self) -> None:
        """Drop what can no longer count: creations out of the window, sessions past their offer
        timeout (reaped by then), and clients left with neither; memory stays bounded."""
        now = self._clock()
        for key, c in list(self._clients.items()):
            c.expire(now)
            c.unoffered = {sid: t for sid, t in c.unoffered.items() if t > now - 2 * self.offer_timeout_s}
            if not c.created and not c.unoffered and not c.creating:
                del self._clients[key]

    def __len__(self) -> int:
        return len(self._clients)


def _seconds(wait: float) -> int:
    return max(1, math.ceil(wait))
