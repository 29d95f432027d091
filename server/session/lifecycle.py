"""The steps of a session's life that other tasks wait on, and how it ended."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class Lifecycle:
    """Set once each, in any order but ``closed`` last; ``closing`` is set before ``closed``, when
    teardown begins, so that late callbacks start nothing new."""

    engine_started: asyncio.Event = field(default_factory=asyncio.Event)  # the engine runs ahead of the peer
    connected: asyncio.Event = field(default_factory=asyncio.Event)  # the peer (or a viewer) connected
    started: asyncio.Event = field(default_factory=asyncio.Event)  # the feed clock and broadcast run
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    media_starting: bool = False  # an offer or a viewer asked for media; it starts once both events above are set
    closing: bool = False
    close_reason: str | None = None
