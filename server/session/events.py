"""A session's events on their way to the control socket and its observers.

Each reader has a bounded queue. When one is full (its reader stopped reading), the oldest
``metrics`` event goes first: a newer one follows within a second, while a lost
``playback.*`` or ``error`` event is lost for good. Only a queue that holds no ``metrics``
event drops another kind (its oldest). Every drop is counted in ``/metrics`` by event type.
A socket's reader waits for room in its queue (:meth:`EventQueue.room`) before it reads the
next message, for a while: a client that sends a burst gets every answer at the pace it reads
them, and one that stops reading cannot hold the reader for good.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

from server.base.metrics import ServerMetrics
from server.base.protocol import ErrorEvent, MetricsEvent, ServerEvent, SessionReady

EVENT_QUEUE = 256
MAX_OBSERVERS = 4


class EventQueue:
    """Bounded FIFO of events for one reader; a full queue drops as the module says, never blocks."""

    def __init__(self, maxsize: int, on_drop: Callable[[ServerEvent], None]) -> None:
        self.maxsize = maxsize
        self._items: deque[ServerEvent] = deque()
        self._on_drop = on_drop
        self._readable = asyncio.Event()
        self._roomy = asyncio.Event()  # set when the queue is at most half full
        self._roomy.set()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, event: ServerEvent) -> None:
        if len(self._items) >= self.maxsize:
            victim = self._victim(event)
            self._on_drop(victim)
            if victim is event:
                return
            self._items.remove(victim)
        self._items.append(event)
        self._readable.set()
        if len(self._items) > self.maxsize // 2:
            self._roomy.clear()

    async def get(self) -> ServerEvent:
        while not self._items:
            self._readable.clear()
            await self._readable.wait()
        event = self._items.popleft()
        if len(self._items) <= self.maxsize // 2:
            self._roomy.set()
        return event

    async def room(self, patience_s: float) -> None:
        """Until the queue is at most half full, or ``patience_s`` has passed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._roomy.wait(), patience_s)

    def _victim(self, incoming: ServerEvent) -> ServerEvent:
        for event in self._items:
            if isinstance(event, MetricsEvent):
                return event
        return incoming if isinstance(incoming, MetricsEvent) else self._items[0]


class SessionEvents:
    """Fans each event out to the control socket's queue and every observer's."""

    def __init__(self, metrics: ServerMetrics, ready_event: Callable[[], SessionReady], started: asyncio.Event) -> None:
        self._metrics = metrics
        self._ready_event = ready_event
        self._started = started
        self._control = EventQueue(EVENT_QUEUE, self._dropped_from_control)
        self._observers: set[EventQueue] = set()
        self._ready_pending = False

    def emit(self, event: ServerEvent) -> None:
        if isinstance(event, ErrorEvent):
            self._metrics.errors.labels(event.code).inc()
        for queue in (self._control, *self._observers):
            queue.put(event)

    def announce_ready(self) -> None:
        """Queue ``session.ready`` unless one is already waiting to be sent (reconnects get a fresh one)."""
        if not self._ready_pending:
            self._ready_pending = True
            self.emit(self._ready_event())

    async def room(self, patience_s: float) -> None:
        """Until the control socket's queue has room (see :meth:`EventQueue.room`)."""
        await self._control.room(patience_s)

    async def next(self) -> ServerEvent:
        """The control socket's next event."""
        event = await self._control.get()
        if isinstance(event, SessionReady):
            self._ready_pending = False
        return event

    def observe(self) -> EventQueue | None:
        """A read-only event feed (a viewer page next to an agent that holds the control socket); None if full."""
        if len(self._observers) >= MAX_OBSERVERS:
            return None
        queue = EventQueue(EVENT_QUEUE, self._count_drop)
        if self._started.is_set():
            queue.put(self._ready_event())
        self._observers.add(queue)
        return queue

    def unobserve(self, queue: EventQueue) -> None:
        self._observers.discard(queue)

    def _count_drop(self, event: ServerEvent) -> None:
        self._metrics.events_dropped.labels(event.type).inc()

    def _dropped_from_control(self, event: ServerEvent) -> None:
        self._count_drop(event)
        if isinstance(event, SessionReady):
            self._ready_pending = False
