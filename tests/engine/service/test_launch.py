"""Nothing that waits on a worker runs on the event loop: a node's worker that stalls in the
handshake, or halfway through a message, leaves the loop ticking (every tick within 0.1 s while it
stalls); what is sent during the handshake is sent after it; a handshake that never ends is a failed
start, and one whose worker goes is one too."""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import socket
import struct
import threading
import time
from multiprocessing import Pipe
from multiprocessing.connection import Listener

import numpy as np
import pytest
from server_helpers import wait_until

from engine.service.launch import ConnectionHandle, NodeHandle
from engine.service.messages import WorkerFailed
from engine.service.worker import WorkerOptions

KEY = b"node-key"
SAFETY_S = 3.0  # a blocked loop is released after this, so that the test fails instead of hanging


async def lag_while(seconds: float) -> np.ndarray:
    """How late each 1 ms sleep of the loop woke, over ``seconds``."""
    ticks = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic()
        await asyncio.sleep(0.001)
        ticks.append(time.monotonic() - t - 0.001)
    return np.array(ticks)


def assert_ticking(lag: np.ndarray) -> None:
    assert lag.size > 50 and lag.max() < 0.1, f"{lag.size} ticks, the longest {lag.max() * 1000:.0f} ms late"


def options(tmp_path) -> WorkerOptions:
    return WorkerOptions(config="micro", socket_dir=str(tmp_path), key=KEY)


class Silent:
    """A socket that takes connections (its backlog does) and never says a word: a worker stalled
    in the handshake. ``release`` closes what it took, the handshake's end of file."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen()
        self.lock = threading.Lock()
        self.safety = threading.Timer(SAFETY_S, self.release)
        self.safety.start()

    def release(self) -> None:
        with self.lock:
            if self.sock.fileno() < 0:
                return
            self.sock.setblocking(False)
            try:
                while True:
                    self.sock.accept()[0].close()
            except BlockingIOError:
                pass
            self.sock.close()
        self.safety.cancel()


async def test_a_stalled_handshake_leaves_the_loop_ticking_and_is_a_failed_start_once_the_worker_goes(tmp_path):
    opts = options(tmp_path)
    silent = Silent(opts.address)
    try:
        handle = NodeHandle(opts)
        said, lost = [], []
        handle.connect(said.append, lost.append, "test-outbox")
        lag = await lag_while(1.0)
        stalled = said == [] and not handle.alive()
    finally:
        silent.release()
    assert_ticking(lag)
    assert stalled
    assert await wait_until(lambda: said, 5.0)
    assert isinstance(said[0], WorkerFailed) and "cannot be reached" in said[0].message and lost == []


async def test_a_handshake_that_never_ends_is_a_failed_start(tmp_path):
    opts = options(tmp_path)
    silent = Silent(opts.address)
    try:
        handle = NodeHandle(opts, dial_timeout_s=0.3)
        said: list = []
        handle.connect(said.append, print, "test-outbox")
        assert await wait_until(lambda: said, 2.0)
    finally:
        silent.release()
    assert isinstance(said[0], WorkerFailed) and "did not answer in 0 s" in said[0].message


async def test_what_is_sent_during_a_slow_handshake_is_sent_after_it_in_order(tmp_path):
    opts = options(tmp_path)
    listener = Listener(opts.address, family="AF_UNIX", authkey=KEY)
    got: list = []
    answer = threading.Event()

    def worker() -> None:  # answers the handshake when the test lets it, then reads two messages, answers one
        answer.wait(5.0)
        with listener.accept() as conn:
            got.extend([conn.recv(), conn.recv()])
            conn.send("ready")
            with contextlib.suppress(EOFError):
                conn.recv()  # until the web side leaves

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    handle = NodeHandle(opts)
    said, lost = [], []
    send = handle.connect(said.append, lost.append, "test-outbox")
    send("first")
    send("second")
    assert_ticking(await lag_while(0.3))  # the handshake is under way meanwhile
    assert not got, "nothing goes out before the handshake"
    answer.set()
    assert await wait_until(lambda: said, 5.0)
    assert got == ["first", "second"] and said == ["ready"] and handle.alive()
    handle.kill()
    assert await wait_until(lambda: lost, 2.0)
    thread.join(5.0)
    assert not thread.is_alive() and lost == ["this web process left the engine worker"]
    listener.close()


async def test_a_message_that_stalls_halfway_leaves_the_loop_ticking_and_arrives_once_whole():
    ours, worker = Pipe(duplex=True)
    handle = ConnectionHandle()
    handle.conn = ours
    said, lost = [], []
    handle.connect(said.append, lost.append, "test-outbox")
    payload = pickle.dumps({"stats": list(range(1000))})
    frame = struct.pack("!i", len(payload)) + payload
    raw = socket.socket(fileno=worker.fileno())
    lock, rest = threading.Lock(), [frame[100:]]

    def send_rest() -> None:
        with lock:
            if rest:
                raw.sendall(rest.pop())

    raw.sendall(frame[:100])  # the length and part of the message, then nothing
    safety = threading.Timer(SAFETY_S, send_rest)
    safety.start()
    lag = await lag_while(1.0)
    stalled = said == []
    safety.cancel()
    send_rest()
    assert_ticking(lag)
    assert stalled
    assert await wait_until(lambda: said, 2.0)
    assert said == [{"stats": list(range(1000))}]
    worker.send("next")
    assert await wait_until(lambda: len(said) == 2, 2.0) and said[1] == "next"
    raw.detach()
    worker.close()
    assert await wait_until(lambda: lost, 2.0)
    assert lost == ["the engine worker closed its connection"]
    handle.disconnect()


@pytest.fixture(autouse=True)
def no_threads_left_behind():
    """Every reader thread a test started ends once its handle is disconnected or its connection ends."""
    yield
    deadline = time.monotonic() + 2.0
    for thread in [t for t in threading.enumerate() if t.name.endswith("-reader")]:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not [t.name for t in threading.enumerate() if t.name.startswith("test-outbox-reader")]
