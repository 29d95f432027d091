"""A worker connection's writer: the web process's event loop never waits on a worker.

``Outbox.put`` pickles a message on the caller's thread (so that later changes to its arrays
cannot reach the worker) and queues the bytes; a thread of its own writes them, in order. A
worker that takes nothing for ``timeout_s`` (its inbox stalled), or an outbox holding more than
``limit_bytes``, counts as gone: ``on_broken`` is called once, with the reason, and what is put
after that is dropped. ``on_broken`` may run on the writer's thread; it is never called once the
outbox is closed.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection

from engine.service import wire

# Bytes queued for one worker, at most: minutes of every session's audio, or a few photo avatars.
OUTBOX_LIMIT_BYTES = 64 << 20


class Outbox:
    def __init__(self, conn: Connection, on_broken: Callable[[str], None], name: str,
                 limit_bytes: int = OUTBOX_LIMIT_BYTES, timeout_s: float = wire.SEND_TIMEOUT_S) -> None:
        # The connection's socket, duplicated: the writer owns it and closes it when it ends.
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(conn.fileno()))
        self._on_broken = on_broken
        self._limit = limit_bytes
        self._timeout_s = timeout_s
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.queued_bytes = 0
        self.broken = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, msg: object) -> None:
        """Queue ``msg`` for the worker; returns at once."""
        if self.broken:
            return
        data = wire.encode(msg)
        with self._lock:
            full = self.queued_bytes + len(data) > self._limit
            if not full:
                self.queued_bytes += len(data)
        if full:
            self._break(f"more than {self._limit} bytes wait for the engine worker")
            return
        self._queue.put(data)

    def close(self) -> None:
        """The worker is gone: what is still queued is dropped, and the writer ends."""
        with self._lock:
            self.broken = True
        self._queue.put(None)

    def finish(self, timeout_s: float) -> bool:
        """Write what is queued (for up to ``timeout_s``), then end the writer; whether it all went.
        What is put afterwards is dropped."""
        self._queue.put(None)
        done = self.join(timeout_s)
        with self._lock:
            self.broken = True
        return done

    def join(self, timeout_s: float) -> bool:
        """Wait for the writer to end after ``close``; whether it did within ``timeout_s``."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        with self._sock:
            while (data := self._queue.get()) is not None:
                if not self.broken:
                    try:
                        wire.write(self._sock, data, self._timeout_s)
                    except TimeoutError:
                        self._break(f"the engine worker read nothing for {self._timeout_s} s")
                    except OSError:
                        self._break("the engine worker's connection broke")
                with self._lock:
                    self.queued_bytes -= len(data)

    def _break(self, reason: str) -> None:
        with self._lock:
            if self.broken:
                return
            self.broken = True
        self._on_broken(reason)
