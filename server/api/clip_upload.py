"""An uploaded clip streamed into a file under a byte cap, whatever the body's framing or type.

Bytes are counted as they arrive (a declared ``Content-Length`` or chunked alike), so a body
over the cap is refused with ``413 video_too_large`` one network chunk past it, never read
whole first; the caller deletes the file. A ``multipart/form-data`` body is parsed as it
streams (not spooled by a form parser before anything is checked): the ``video`` field goes
into the file, other fields are counted and dropped, and the form around the clip may add at
most ``FORM_OVERHEAD`` bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from python_multipart.multipart import MultipartParseError, MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from server.base.errors import ApiError

FORM_OVERHEAD = 64 * 1024  # boundaries, part headers and small fields around the clip
MAX_PARTS = 8
FIELD = b"video"


def too_large(limit: int) -> ApiError:
    return ApiError(413, "video_too_large", f"clip over {limit} bytes")


class _Form:
    """The callbacks of a streaming multipart parser: the ``video`` part's bytes into ``out``."""

    def __init__(self, out: BinaryIO, limit: int) -> None:
        self.out = out
        self.limit = limit
        self.written = 0
        self.parts = 0
        self.found = False  # a video part began
        self.ended = False  # the closing boundary was read
        self._writing = False
        self._field = b""
        self._value = b""
        self._disposition = b""

    def callbacks(self) -> dict:
        return {"on_part_begin": self._part_begin, "on_header_field": self._header_field,
                "on_header_value": self._header_value, "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished, "on_part_data": self._part_data,
                "on_part_end": self._part_end, "on_end": self._end}

    def _part_begin(self) -> None:
        self.parts += 1
        if self.parts > MAX_PARTS:
            raise ApiError(400, "bad_video", f"the multipart form has over {MAX_PARTS} fields")
        self._disposition = b""

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _header_end(self) -> None:
        if self._field.lower() == b"content-disposition":
            self._disposition = self._value
        self._field, self._value = b"", b""

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        self._writing = options.get(b"name") == FIELD and not self.found
        self.found = self.found or self._writing

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._writing:
            self.written += end - start
            if self.written > self.limit:
                raise too_large(self.limit)
            self.out.write(data[start:end])

    def _part_end(self) -> None:
        self._writing = False

    def _end(self) -> None:
        self.ended = True


async def receive_clip(request: Request, path: Path, limit: int) -> int:
    """Stream the request's clip into ``path`` (raw ``video/*`` or ``application/octet-stream``, or
    the ``video`` field of a multipart form); its size in bytes. ``ApiError``: 413 past ``limit``,
    415 for another type, 400 for an empty clip or a form without one."""
    kind, options = parse_options_header(request.headers.get("content-type", ""))
    kind = kind.decode("latin-1").lower()
    try:
        return await _receive(request, path, limit, kind, options.get(b"boundary"))
    except ClientDisconnect:  # the client left, or was answered 413 by the body limit: nobody to answer
        raise ApiError(400, "bad_video", "the client left before the clip was in") from None


async def _receive(request: Request, path: Path, limit: int, kind: str, boundary: bytes | None) -> int:
    with path.open("wb") as out:
        if kind == "multipart/form-data":
            written = await _receive_form(request, out, limit, boundary)
        elif kind.startswith("video/") or kind == "application/octet-stream":
            written = 0
            async for chunk in request.stream():
                written += len(chunk)
                if written > limit:
                    raise too_large(limit)
                out.write(chunk)
        else:
            raise ApiError(415, "bad_video", "send the clip as video/* (raw body) or multipart/form-data")
    if written == 0:
        raise ApiError(400, "bad_video", "the clip is empty")
    return written


async def _receive_form(request: Request, out: BinaryIO, limit: int, boundary: bytes | None) -> int:
    if not boundary:
        raise ApiError(400, "bad_video", "the multipart form has no boundary")
    form = _Form(out, limit)
    parser = MultipartParser(boundary, form.callbacks())
    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit + FORM_OVERHEAD:
                raise too_large(limit)
            parser.write(chunk)
        parser.finalize()
    except MultipartParseError as exc:
        raise ApiError(400, "bad_video", f"malformed multipart form ({exc})") from None
    if not form.found:
        raise ApiError(400, "bad_video", "the multipart form needs the clip in a field named 'video'")
    if not form.ended:
        raise ApiError(400, "bad_video", "the multipart form ended before its closing boundary")
    return form.written
