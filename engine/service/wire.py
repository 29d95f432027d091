"""One message onto a worker's connection, whatever the blocking mode of its descriptor.

The web process watches each worker's connection with its event loop's ``add_reader``; uvloop
(``uvicorn[standard]``) makes such descriptors non-blocking, and then ``Connection.send`` of a
message larger than the socket buffer (a photo avatar's 512x512 crop) fails half-written with
``BlockingIOError``. ``send`` writes the same framing ``multiprocessing.connection`` reads (a
4-byte big-endian length, then the pickle), waiting for room with ``select``, up to a deadline.
"""

from __future__ import annotations

import os
import select
import struct
import time
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler

SEND_TIMEOUT_S = 2.0  # a worker's inbox thread reads all the time: longer means it is gone


def send(conn: Connection, msg: object, timeout_s: float = SEND_TIMEOUT_S) -> None:
    """Pickle ``msg`` and write it whole; ``TimeoutError`` if the reader takes no more for ``timeout_s``."""
    body = ForkingPickler.dumps(msg)
    if len(body) > 0x7FFFFFFF:
        raise ValueError(f"a {len(body)}-byte message is too large for a worker connection")
    data = memoryview(struct.pack("!i", len(body)) + bytes(body))
    fd = conn.fileno()
    deadline = time.monotonic() + timeout_s
    while data:
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the worker took none of a {len(body)}-byte message for {timeout_s} s") from None
            select.select([], [fd], [], left)
            continue
        data = data[written:]
