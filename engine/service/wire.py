"""One message onto a worker's connection, whatever the blocking mode of its descriptor.

The web process watches each worker's connection with its event loop's ``add_reader``; uvloop
(``uvicorn[standard]``) makes such descriptors non-blocking, and then ``Connection.send`` of a
message larger than the socket buffer (a photo avatar's 512x512 crop) fails half-written with
``BlockingIOError``; the standard loop leaves them blocking, and then a write to a worker that
reads nothing waits for ever. :func:`encode` makes the framing ``multiprocessing.connection``
reads (a 4-byte big-endian length, then the pickle); :func:`write` puts it on the socket whole
with non-blocking sends, waiting for room with ``select``, up to a deadline. The web process
writes from a thread of its own (``engine.service.outbox``), never from its event loop.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from multiprocessing.reduction import ForkingPickler

SEND_TIMEOUT_S = 2.0  # a worker's inbox thread reads all the time: longer means it is gone


def encode(msg: object) -> bytes:
    """``msg`` pickled and framed for ``Connection.recv``."""
    body = ForkingPickler.dumps(msg)
    if len(body) > 0x7FFFFFFF:
        raise ValueError(f"a {len(body)}-byte message is too large for a worker connection")
    return struct.pack("!i", len(body)) + bytes(body)


def write(sock: socket.socket, data: bytes, timeout_s: float = SEND_TIMEOUT_S) -> None:
    """Write ``data`` whole; ``TimeoutError`` if the reader takes no more for ``timeout_s``."""
    view = memoryview(data)
    deadline = time.monotonic() + timeout_s
    while view:
        try:
            sent = sock.send(view, socket.MSG_DONTWAIT)
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the worker took none of a {len(data)}-byte message for {timeout_s} s") from None
            select.select([], [sock], [], left)
            continue
        view = view[sent:]
