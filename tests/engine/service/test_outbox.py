"""Outbox: messages reach the worker whole and in order from a writer thread; a worker that reads
nothing, or an outbox over its bound, is reported once as broken while ``put`` never waits."""

from __future__ import annotations

import os
import threading
import time
from multiprocessing import Pipe

import numpy as np
import pytest

from engine.service.outbox import Outbox


def test_messages_arrive_whole_and_in_order_over_a_non_blocking_connection() -> None:
    web, worker = Pipe()
    os.set_blocking(web.fileno(), False)  # as uvloop leaves the web side
    photo = np.random.default_rng(0).integers(0, 255, (512, 512, 3), np.uint8)  # larger than the socket buffer
    broken: list[str] = []
    outbox = Outbox(web, broken.append, name="test-outbox")
    audio = np.arange(320, dtype=np.float32)
    outbox.put(("open", photo))
    outbox.put(("push", audio))
    audio[:] = -1  # changed after put: the worker still gets what was put
    got = [worker.recv(), worker.recv()]
    outbox.close()
    assert outbox.join(5)  # the writer counts a message off only after its last byte went out
    assert got[0][0] == "open" and np.array_equal(got[0][1], photo)
    assert got[1][0] == "push" and np.array_equal(got[1][1], np.arange(320, dtype=np.float32))
    assert broken == [] and outbox.queued_bytes == 0


@pytest.mark.parametrize("blocking", [False, True])  # uvloop's descriptors, the standard loop's
def test_a_worker_that_reads_nothing_is_reported_once_and_put_never_waits(blocking: bool) -> None:
    web, _worker = Pipe()
    os.set_blocking(web.fileno(), blocking)
    reported = threading.Event()
    reasons: list[str] = []

    def on_broken(reason: str) -> None:
        reasons.append(reason)
        reported.set()

    outbox = Outbox(web, on_broken, name="test-outbox", timeout_s=0.3)
    t0 = time.monotonic()
    for _ in range(8):
        outbox.put(bytes(1 << 20))  # 8 MiB that nobody reads
    put_s = time.monotonic() - t0
    assert reported.wait(5)
    broken_s = time.monotonic() - t0
    outbox.put(b"after")  # dropped
    outbox.close()
    assert put_s < 0.25, put_s  # queued: the 0.3 s write deadline was spent on the writer's thread
    assert 0.25 < broken_s < 3, broken_s
    assert reasons == ["the engine worker read nothing for 0.3 s"]


def test_an_outbox_over_its_bound_is_broken_at_once() -> None:
    web, _worker = Pipe()
    os.set_blocking(web.fileno(), False)
    reasons: list[str] = []
    outbox = Outbox(web, reasons.append, name="test-outbox", limit_bytes=4 << 20, timeout_s=30)
    for _ in range(6):
        outbox.put(bytes(1 << 20))
    outbox.close()
    assert reasons == [f"more than {4 << 20} bytes wait for the engine worker"]


def test_finish_writes_what_is_queued_then_drops_what_comes_after() -> None:
    web, worker = Pipe()
    outbox = Outbox(web, print, name="test-outbox")
    for i in range(3):
        outbox.put(("frames", i))
    assert outbox.finish(5)
    outbox.put(("late", 3))  # dropped: the writer has ended
    web.close()
    got = []
    with pytest.raises(EOFError):
        while True:
            got.append(worker.recv())
    assert got == [("frames", 0), ("frames", 1), ("frames", 2)]
