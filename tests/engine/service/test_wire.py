"""wire.write: a message larger than the socket buffer arrives whole over a non-blocking descriptor
(as uvloop leaves the web side of a worker connection) or a blocking one (as the standard loop
does), read by the standard Connection.recv; a reader that takes nothing costs the deadline."""

from __future__ import annotations

import os
import socket
import threading
import time
from multiprocessing import Pipe

import numpy as np
import pytest

from engine.service import wire


def web_socket(conn) -> socket.socket:
    return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(conn.fileno()))


@pytest.mark.parametrize("blocking", [False, True])
def test_a_large_message_arrives_whole(blocking: bool) -> None:
    web, worker = Pipe()
    os.set_blocking(web.fileno(), False)
    photo = np.random.default_rng(0).integers(0, 255, (512, 512, 3), np.uint8)
    with pytest.raises(BlockingIOError):
        web.send(("open", photo))  # what Connection.send does here
    web2, worker2 = Pipe()
    os.set_blocking(web2.fileno(), blocking)
    got: list = []
    reader = threading.Thread(target=lambda: got.extend([worker2.recv(), worker2.recv()]))
    reader.start()
    with web_socket(web2) as sock:
        wire.write(sock, wire.encode(("open", photo)))
        wire.write(sock, wire.encode(("push", 7)))
    reader.join(5)
    assert got[0][0] == "open" and np.array_equal(got[0][1], photo) and got[1] == ("push", 7)


@pytest.mark.parametrize("blocking", [False, True])
def test_a_reader_that_takes_nothing_times_out(blocking: bool) -> None:
    web, _worker = Pipe()
    os.set_blocking(web.fileno(), blocking)
    t0 = time.monotonic()
    with web_socket(web) as sock, pytest.raises(TimeoutError):
        wire.write(sock, wire.encode(bytes(8 << 20)), timeout_s=0.3)
    assert 0.25 < time.monotonic() - t0 < 3
