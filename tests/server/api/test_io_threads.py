"""The server's executor: every thread started up front, the count flat however busy it gets,
all gone when the app stops."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from server_helpers import make_settings, running_server

from server.api.io_threads import IO_THREADS, start_io_threads, stop_io_threads


def threads_of(executor: ThreadPoolExecutor) -> set[threading.Thread]:
    return set(executor._threads)  # CPython keeps the threads it started here


async def test_threads_start_up_front_and_stay_flat_under_load() -> None:
    loop = asyncio.get_running_loop()
    executor = start_io_threads(loop, 3)
    started = threads_of(executor)
    assert len(started) == 3 and all(t.is_alive() for t in started)
    release = threading.Event()
    waiting = asyncio.gather(*[asyncio.to_thread(release.wait, 5) for _ in range(9)])  # 3x the threads
    await asyncio.sleep(0.05)
    assert threads_of(executor) == started
    release.set()
    assert all(await waiting)
    stop_io_threads(loop, executor)
    await asyncio.to_thread(lambda: None)  # the loop still has an executor after the stop
    for t in started:
        t.join(2)
    assert not any(t.is_alive() for t in started)


async def test_the_app_holds_its_threads_from_start_to_stop() -> None:
    async with running_server(make_settings(), config="micro") as srv:
        started = threads_of(srv.app.state.io_threads)
        assert len(started) == IO_THREADS and all(t.is_alive() for t in started)
        thread_gauge = [line for line in (await srv.http.get("/metrics")).text.splitlines()
                        if line.startswith("avatar_server_threads ")]
        assert float(thread_gauge[0].split()[1]) >= IO_THREADS
    for t in started:
        t.join(2)
    assert not any(t.is_alive() for t in started)
