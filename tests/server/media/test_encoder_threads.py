"""Encoder threads: jobs run off the loop, their results and errors come back on the loop's thread."""

from __future__ import annotations

import asyncio
import threading

from server.media.encoder_threads import EncoderThreads


async def test_results_come_back_on_the_loop_in_the_order_of_one_thread():
    pool = EncoderThreads(threads=1)
    loop_thread = threading.get_ident()
    ran_on, back = [], []
    finished = asyncio.Event()

    def job(i: int):
        ran_on.append(threading.current_thread().name)
        return i * i

    def done(result, error) -> None:
        back.append((result, error, threading.get_ident() == loop_thread))
        if len(back) == 5:
            finished.set()

    for i in range(5):
        pool.submit(lambda i=i: job(i), done)
    await asyncio.wait_for(finished.wait(), 5)
    assert back == [(i * i, None, True) for i in range(5)]
    assert set(ran_on) == {"encoder-0"}


async def test_an_error_is_handed_back_and_the_thread_goes_on():
    pool = EncoderThreads(threads=2)
    back: asyncio.Queue = asyncio.Queue()

    def fail():
        raise ValueError("bad picture")

    pool.submit(fail, lambda result, error: back.put_nowait((result, error)))
    result, error = await asyncio.wait_for(back.get(), 5)
    assert result is None and isinstance(error, ValueError) and str(error) == "bad picture"
    pool.submit(lambda: "next", lambda result, error: back.put_nowait((result, error)))
    assert await asyncio.wait_for(back.get(), 5) == ("next", None)
