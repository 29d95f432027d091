"""The web processes one engine worker serves.

A worker always has its **owner**: the process that started it, over the pipe it was started
with (or, for an in-process worker, the thread handover); the owner's end of the connection ends
the worker. On a node, the worker also listens on a local socket (``WorkerOptions.socket_dir``)
where any number of **guests** (the node's web processes) connect with the node's key; a guest
that goes (its process died, or it stopped reading for ``wire.SEND_TIMEOUT_S``) costs only its own
sessions, which the worker closes, freeing their state; an owner that goes ends the worker.

Every connection has a reader thread that puts ``(client, message)`` into the worker's inbox;
joining and leaving arrive there too (``ClientJoined``, ``ClientGone``), so the worker loop is the
only thread that touches sessions and the only one that sends. Sessions belong to the client that
opened them: what another client says about them is ignored, and their frames, failures and
quality changes go to their owner alone. What is sent to a guest, or to an owner in another
process, goes through an ``Outbox``, so a web process that stops reading never holds up the worker
(an in-process owner's messages are put on its event loop, which never waits either).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, Listener
from pathlib import Path

from engine.service.messages import WorkerStats
from engine.service.outbox import Outbox

log = logging.getLogger(__name__)
OWNER = 0
OWNER_FLUSH_S = 1.0  # what is still queued for the owner when the worker ends is written for this long


@dataclass(frozen=True)
class ClientJoined:
    client: int


@dataclass(frozen=True)
class ClientGone:
    client: int
    reason: str


class Clients:
    """The worker's connections, and which client owns which session."""

    def __init__(self, inbox: queue.SimpleQueue, owner) -> None:
        self._inbox = inbox
        self._owner = owner
        self._owner_outbox: Outbox | None = None
        send = owner.send  # an in-process owner's: onto its event loop
        if hasattr(owner, "fileno"):  # a pipe to the process that started this worker
            self._owner_outbox = Outbox(owner, lambda reason: inbox.put(ClientGone(OWNER, reason)), name="owner-outbox")
            send = self._owner_outbox.put
        self._send: dict[int, Callable[[object], None]] = {OWNER: send}
        self._closers: dict[int, Callable[[], None]] = {}
        self._ids = itertools.count(OWNER + 1)
        self._lock = threading.Lock()
        self.owner_of: dict[str, int] = {}  # session -> the client that opened it
        self._listener: Listener | None = None

    # ---- connections -------------------------------------------------------------------

    def start(self) -> None:
        """Read the owner's commands."""
        self._read(OWNER, self._owner)

    def add_guest(self, conn: Connection) -> int:
        client = next(self._ids)
        outbox = Outbox(conn, lambda reason: self._inbox.put(ClientGone(client, reason)), name=f"guest-outbox-{client}")
        with self._lock:
            self._send[client] = outbox.put
            self._closers[client] = lambda: (outbox.close(), conn.close())
        self._inbox.put(ClientJoined(client))
        self._read(client, conn)
        return client

    def _read(self, client: int, conn) -> None:
        def run() -> None:
            try:
                while True:
                    self._inbox.put((client, conn.recv()))
            except (EOFError, OSError):
                self._inbox.put(ClientGone(client, "its connection closed"))

        threading.Thread(target=run, name=f"worker-inbox-{client}", daemon=True).start()

    def listen(self, address: str, key: bytes) -> None:
        """Take guests at the local socket ``address`` (only processes that know ``key`` get in)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)  # a worker that died before this one left it
        Path(address).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._listener = listener = Listener(address, family="AF_UNIX", authkey=key)
        os.chmod(address, 0o600)

        def accept() -> None:
            while True:
                try:
                    conn = listener.accept()
                except OSError:
                    return  # the listener closed
                except Exception as exc:  # a peer that failed the key handshake
                    log.warning("a connection to the engine worker was refused: %s", exc)
                    continue
                self.add_guest(conn)

        threading.Thread(target=accept, name="worker-accept", daemon=True).start()

    def drop(self, client: int) -> list[str] | None:
        """Forget a guest; the sessions it owned, for the worker to close (None: gone already)."""
        with self._lock:
            if self._send.pop(client, None) is None:
                return None
            closer = self._closers.pop(client, None)
        if closer is not None:
            closer()
        owned = [sid for sid, c in self.owner_of.items() if c == client]
        for sid in owned:
            del self.owner_of[sid]
        return owned

    def close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        for client in [c for c in self._send if c != OWNER]:
            self.drop(client)
        if self._owner_outbox is not None:
            self._owner_outbox.finish(OWNER_FLUSH_S)

    # ---- messages ----------------------------------------------------------------------

    def owns(self, client: int, session: str) -> bool:
        return self.owner_of.get(session) == client

    def send(self, client: int, msg: object) -> None:
        send = self._send.get(client)
        if send is not None:
            send(msg)

    def to_owner_of(self, session: str, msg: object) -> None:
        client = self.owner_of.get(session)
        if client is not None:
            self.send(client, msg)

    def send_stats(self, stats: WorkerStats, only: int | None = None) -> None:
        """``stats`` to every client (or to ``only``), each with its own session count; a guest sees
        its own sessions' figures only."""
        with self._lock:
            clients = list(self._send) if only is None else [only]
        for client in clients:
            mine = {sid for sid, c in self.owner_of.items() if c == client}
            if client == OWNER:
                self.send(client, replace(stats, client_sessions=len(mine)))
                continue
            self.send(client, replace(
                stats, client_sessions=len(mine),
                quality_levels={s: v for s, v in stats.quality_levels.items() if s in mine},
                state_bytes={s: v for s, v in stats.state_bytes.items() if s in mine},
            ))
