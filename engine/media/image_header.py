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
# Images a JPEG file may hold one after another (an MPO's views: a camera writes 2 or 3); each is
# read from its own start, so the count bounds the work.
MAX_JPEG_IMAGES = 16


class ImageError(MediaError):
    """An image that cannot be used (not PNG/JPEG/WebP/GIF, corrupt, truncated, too small or too large)."""


@dataclass(frozen=True)
class ImageHeader:
    format: str  # the Pillow format name: PNG, JPEG, WEBP or GIF
    width: int
    height: int
    # The size each later frame of a multi-frame file declares (a GIF frame: the canvas it reaches
    # to, which a decoder grows to), so that a limit holds for every frame, not the first only.
    frames: tuple[tuple[int, int], ...] = ()

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
    first = _jpeg_frame(data, 0)
    frames, start = [], data.find(b"\xff\xd8\xff", 2)
    while start > 0:  # entropy-coded data never holds 0xFF 0xD8: each is another image's start
        if len(frames) == MAX_JPEG_IMAGES - 1:
            raise ImageError(f"a JPEG file holds at most {MAX_JPEG_IMAGES} images")
        try:
            later = _jpeg_frame(data, start)
            frames.append((later.width, later.height))
        except ImageError:
            pass  # not an image a decoder could reach
        start = data.find(b"\xff\xd8\xff", start + 2)
    return ImageHeader("JPEG", first.width, first.height, tuple(frames))


def _jpeg_frame(data: bytes, start: int) -> ImageHeader:
    """The frame header of the JPEG image starting at ``start``."""
    pos = start + 2
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
    if len(data) < 13:
        raise ImageError("truncated GIF header")
    width, height = struct.unpack("<HH", data[6:10])
    _sized("GIF", width, height)
    return ImageHeader("GIF", width, height, tuple(_gif_frames(data)))


def _gif_frames(data: bytes) -> list[tuple[int, int]]:
    """The canvas each image descriptor reaches to (left + width, top + height), in file order; a
    truncated file ends the walk (the decoder then stops there too)."""
    frames: list[tuple[int, int]] = []
    pos = 13 + _color_table(data[10])
    while pos < len(data):
        block = data[pos]
        if block == 0x3B:  # trailer
            break
        if block == 0x21:  # extension: label, then sub-blocks
            pos = _skip_sub_blocks(data, pos + 2)
        elif block == 0x2C:  # image descriptor
            if pos + 10 > len(data):
                break
            left, top, w, h = struct.unpack("<HHHH", data[pos + 1 : pos + 9])
            frames.append((left + w, top + h))
            pos = _skip_sub_blocks(data, pos + 10 + _color_table(data[pos + 9]) + 1)  # + LZW code size
        else:
            break
    return frames


def _color_table(flags: int) -> int:
    return 3 * 2 ** ((flags & 7) + 1) if flags & 0x80 else 0


def _skip_sub_blocks(data: bytes, pos: int) -> int:
    while pos < len(data) and data[pos]:
        pos += 1 + data[pos]
    return pos + 1
