"""The worker threads behind the server's ``asyncio.to_thread`` calls, all started up front.

TTS, image decoding and peer teardown run in the event loop's default executor. asyncio's own
executor starts a thread only when a call finds none idle, so the server's thread count creeps
up for as long as it runs, until the busiest moment so far has been seen: in an hours-long run
that looks like a leak and hides a real one. The server's executor has a fixed number of
threads, all running from start-up, and they go when the app stops.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

IO_THREADS = 4


def start_io_threads(loop: asyncio.AbstractEventLoop, threads: int = IO_THREADS) -> ThreadPoolExecutor:
    """A ``threads``-thread executor, every thread started, as the loop's default executor."""
    executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="avatar-io")
    barrier = threading.Barrier(threads + 1)
    for _ in range(threads):  # each waits until all have started: the executor must make them all
        executor.submit(barrier.wait)
    barrier.wait()
    loop.set_default_executor(executor)
    return executor


def stop_io_threads(loop: asyncio.AbstractEventLoop, executor: ThreadPoolExecutor) -> None:
    """End ``executor``'s threads; the loop gets a fresh (lazy) default executor for whatever runs on it next."""
    loop.set_default_executor(ThreadPoolExecutor())
    executor.shutdown(wait=False)
