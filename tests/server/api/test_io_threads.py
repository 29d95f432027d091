"""The server's executor: every thread started up front, the count flat however busy it gets,
all gone when the app stops."""

from __future__ import annotations

import asyncio
import threading

from server_helpers import make_settings, running_server

from server.api.io_threads import IO_THREADS, start_io_threads, stop_io_threads


def io_threads() -> int:
    return sum(t.name.startswith("avatar-io") for t in threading.enumerate())


async def test_threads_start_up_front_and_stay_flat_under_load() -> None:
    loop = asyncio.get_running_loop()
    before = io_threads()
    executor = start_io_threads(loop, 3)
    assert io_threads() == before + 3
    release = threading.Event()
    busy = [asyncio.to_thread(release.wait, 5) for _ in range(9)]  # three times as many calls as threads
    waiting = asyncio.gather(*busy)
    await asyncio.sleep(0.05)
    assert io_threads() == before + 3
    release.set()
    assert all(await waiting)
    stop_io_threads(loop, executor)
    await asyncio.to_thread(lambda: None)  # the loop still has an executor after the stop
    for t in [t for t in threading.enumerate() if t.name.startswith("avatar-io")]:
        t.join(2)
    assert io_threads() == before


async def test_the_app_holds_its_threads_from_start_to_stop() -> None:
    before = io_threads()
    async with running_server(make_settings(), config="micro") as srv:
        assert io_threads() == before + IO_THREADS
        thread_gauge = [line for line in (await srv.http.get("/metrics")).text.splitlines()
                        if line.startswith("avatar_server_threads ")]
        assert float(thread_gauge[0].split()[1]) >= IO_THREADS
    for t in [t for t in threading.enumerate() if t.name.startswith("avatar-io")]:
        t.join(2)
    assert io_threads() == before
