"""Image dimensions read from the first bytes of a PNG, JPEG, WebP or GIF file, without decoding.

The decoded size of an image is what costs memory, and a small file can declare a huge one (a
decompression bomb): reading it from the header lets a caller refuse before any decoder allocates
a pixel. Pure byte parsing, no decoder library involved.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from engine.media.audio_io import MediaError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic): they carry the size.
JPEG_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
JPEG_NO_LENGTH = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM and RSTn stand alone


class ImageError(MediaError):
    """An image that cannot be used (not PNG/JPEG/WebP/GIF, corrupt, truncated, too small or too large)."""


@dataclass(frozen=True)
class ImageHeader:
    format: str  # the Pillow format name: PNG, JPEG, WEBP or GIF
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


def probe(data: bytes) -> ImageHeader:
    """The format and declared size of an encoded image; :class:`ImageError` if unreadable."""
    if data.startswith(PNG_MAGIC):
        return _png(data)
    if data.startswith(b"\xff\xd8"):
        return _jpeg(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp(data)
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return _gif(data)
    raise ImageError("not a PNG, JPEG, WebP or GIF image")


def _sized(fmt: str, width: int, height: int) -> ImageHeader:
    if width <= 0 or height <= 0:
        raise ImageError(f"{fmt} header declares an empty image ({width}x{height})")
    return ImageHeader(fmt, width, height)


def _png(data: bytes) -> ImageHeader:
    if len(data) < 24 or data[12:16] != b"IHDR":
        raise ImageError("truncated PNG: no IHDR chunk")
    width, height = struct.unpack(">II", data[16:24])
    return _sized("PNG", width, height)


def _jpeg(data: bytes) -> ImageHeader:
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            raise ImageError("corrupt JPEG: expected a marker")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in JPEG_NO_LENGTH:
            pos += 2
            continue
        if marker in (0xD8, 0xD9, 0xDA):  # a second start, the end, or scan data before any frame header
            raise ImageError("corrupt JPEG: no frame header before the image data")
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if length < 2:
            raise ImageError("corrupt JPEG: segment shorter than its length field")
        if marker in JPEG_SOF:
            if pos + 9 > len(data):
                break
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return _sized("JPEG", width, height)
        pos += 2 + length
    raise ImageError("truncated JPEG: no frame header")


def _webp(data: bytes) -> ImageHeader:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        return _sized("WEBP", width, height)
    if chunk == b"VP8L" and len(data) >= 25:
        if data[20] != 0x2F:
            raise ImageError("corrupt WebP: bad lossless signature")
        bits = int.from_bytes(data[21:25], "little")
        return _sized("WEBP", 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF))
    if chunk == b"VP8 " and len(data) >= 30:
        if data[23:26] != b"\x9d\x01\x2a":
            raise ImageError("corrupt WebP: bad lossy start code")
        width, height = struct.unpack("<HH", data[26:30])
        return _sized("WEBP", width & 0x3FFF, height & 0x3FFF)
    raise ImageError("truncated or unknown WebP header")


def _gif(data: bytes) -> ImageHeader:
    if len(data) < 10:
        raise ImageError("truncated GIF header")
    width, height = struct.unpack("<HH", data[6:10])
    return _sized("GIF", width, height)
