"""The threads that encode every session's outgoing media, off the event loop.

A job reaches them with one C-level queue put and its result comes back with one
``call_soon_threadsafe``: a fraction of what ``run_in_executor`` costs the loop (a concurrent
future, an asyncio future chained to it, the executor's locks and semaphore), which each session
pays 75 times a second. They are not the loop's default executor, where text-to-speech or image
decoding can hold every thread for a second while pictures are due every 40 ms. A fixed set,
started on first use, kept for the life of the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

THREADS = min(4, os.cpu_count() or 1)
Done = Callable[[Any, BaseException | None], None]


class EncoderThreads:
    def __init__(self, threads: int = THREADS) -> None:
        self.threads = threads
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Done, asyncio.AbstractEventLoop]] = queue.SimpleQueue()
        self._started = False
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], Any], done: Done) -> None:
        """Run ``job`` on an encoder thread; ``done(result, error)`` is then called on the running loop."""
        if not self._started:
            self._start()
        self._jobs.put((job, done, asyncio.get_running_loop()))

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            for i in range(self.threads):
                threading.Thread(target=self._run, name=f"encoder-{i}", daemon=True).start()
            self._started = True

    def _run(self) -> None:
        while True:
            job, done, loop = self._jobs.get()
            try:
                result, error = job(), None
            except Exception as exc:
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits for it
                loop.call_soon_threadsafe(done, result, error)


ENCODERS = EncoderThreads()
