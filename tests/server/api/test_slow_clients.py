"""Clients that send a request a byte at a time: each connection is closed once its request line
and headers (408 request_timeout) or its body have taken longer than their deadline, whatever the
trickle, and the server answers everyone else meanwhile."""

from __future__ import annotations

import asyncio
import time

import pytest
from server_helpers import make_settings, running_server

pytestmark = pytest.mark.usefixtures("one_thread")
HEADERS = b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: slow\r\nAccept: */*\r\n\r\n"
BODY_HEAD = b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n"


async def dribble(port: int, head: bytes, then: bytes, every_s: float, for_s: float) -> tuple[bytes, float]:
    """Send ``head`` at once, then ``then`` a byte every ``every_s``; what the server answered and
    when the connection closed (``for_s`` if it never did)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.monotonic()
    writer.write(head)
    answer = b""
    try:
        for byte in then:
            try:
                chunk = await asyncio.wait_for(reader.read(4096), every_s)
            except TimeoutError:
                chunk = None
            if chunk == b"":
                return answer, time.monotonic() - t0
            answer += chunk or b""
            if time.monotonic() - t0 > for_s:
                return answer, for_s
            writer.write(bytes([byte]))
        return answer, for_s
    except ConnectionError:
        return answer, time.monotonic() - t0
    finally:
        writer.close()


async def test_requests_sent_a_byte_at_a_time_are_cut_off_at_their_deadlines():
    settings = make_settings(header_timeout_s=1.0, body_timeout_s=1.5)
    async with running_server(settings, config="puppet") as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        header_slow = [dribble(port, b"", HEADERS * 10, 0.1, 8.0) for _ in range(10)]
        body_slow = [dribble(port, BODY_HEAD, b" " * 4000, 0.1, 8.0) for _ in range(10)]
        results = asyncio.gather(*header_slow, *body_slow)
        served = [(await srv.http.get("/healthz")).status_code for _ in range(5)]
        results = await results
        assert served == [200] * 5
        for answer, closed_after in results[:10]:
            assert closed_after < 3.0, closed_after
            assert answer.startswith(b"HTTP/1.1 408") and b"request_timeout" in answer, answer[:80]
        for _, closed_after in results[10:]:
            assert closed_after < 3.5, closed_after
        assert (await srv.http.get("/healthz")).status_code == 200
