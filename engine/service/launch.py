"""Where a worker loop runs: a subprocess of its own (crash-isolated) or a thread here."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from typing import Protocol

from engine.service.worker import WorkerOptions, process_main, serve


class WorkerHandle(Protocol):
    conn: object  # the web side of the worker's duplex connection
    pid: int | None
    sentinel: int | None  # a file descriptor readable once the worker has ended

    def alive(self) -> bool: ...

    def kill(self) -> None: ...

    def join(self, timeout: float) -> None: ...


class ProcessHandle:
    def __init__(self, options: WorkerOptions) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited threads or loop
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=process_main, args=(child, options), name="avatar-engine", daemon=True)
        self.process.start()
        child.close()
        self.pid = self.process.pid
        self.sentinel = self.process.sentinel

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGKILL)

    def join(self, timeout: float) -> None:
        self.process.join(timeout)


class ThreadHandle:
    """In-process worker: no isolation (a crash here is the web process's), same protocol.
    ``load`` may build its core from an engine already loaded in this process."""

    def __init__(self, options: WorkerOptions, load: Callable | None = None) -> None:
        self.conn, child = multiprocessing.Pipe(duplex=True)
        self.thread = threading.Thread(target=self._run, args=(child, options, load), name="avatar-engine",
                                       daemon=True)
        self.thread.start()
        self.pid = os.getpid()
        self.sentinel = None

    @staticmethod
    def _run(child, options: WorkerOptions, load: Callable | None) -> None:
        try:
            serve(child, options, load)
        finally:
            child.close()

    def alive(self) -> bool:
        return self.thread.is_alive()

    def kill(self) -> None:
        """A thread cannot be killed: closing its connection makes the loop stop at the next command."""
        self.conn.close()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)


def launcher(kind: str, load: Callable | None = None) -> Callable[[WorkerOptions], WorkerHandle]:
    """``subprocess`` (default) or ``inprocess`` (where ``load`` may supply a preloaded core)."""
    if kind == "subprocess":
        if load is not None:
            raise ValueError("a subprocess worker loads its own engine")
        return ProcessHandle
    if kind == "inprocess":
        return lambda options: ThreadHandle(options, load)
    raise ValueError(f"unknown engine kind {kind!r}; choose subprocess or inprocess")
