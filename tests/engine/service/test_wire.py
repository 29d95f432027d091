"""wire.send: a message larger than the socket buffer arrives whole over a non-blocking descriptor
(as uvloop leaves the web side of a worker connection), read by the standard Connection.recv."""

from __future__ import annotations

import os
import threading
import time
from multiprocessing import Pipe

import numpy as np
import pytest

from engine.service import wire


def test_a_large_message_arrives_whole_on_a_non_blocking_connection() -> None:
    web, worker = Pipe()
    os.set_blocking(web.fileno(), False)
    photo = np.random.default_rng(0).integers(0, 255, (512, 512, 3), np.uint8)
    with pytest.raises(BlockingIOError):
        web.send(("open", photo))  # what Connection.send does here
    web2, worker2 = Pipe()
    os.set_blocking(web2.fileno(), False)
    got: list = []
    reader = threading.Thread(target=lambda: got.extend([worker2.recv(), worker2.recv()]))
    reader.start()
    wire.send(web2, ("open", photo))
    wire.send(web2, ("push", 7))
    reader.join(5)
    assert got[0][0] == "open" and np.array_equal(got[0][1], photo) and got[1] == ("push", 7)


def test_a_reader_that_takes_nothing_times_out() -> None:
    web, _worker = Pipe()
    os.set_blocking(web.fileno(), False)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        wire.send(web, bytes(8 << 20), timeout_s=0.3)
    assert 0.25 < time.monotonic() - t0 < 3
