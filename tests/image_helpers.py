"""Encoded test images: every format and mode the reference-image decoder meets, and a PNG bomb."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def encode(im: Image.Image, fmt: str, **options) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **options)
    return buf.getvalue()


def halves(width: int = 120, height: int = 80, left=(255, 0, 0), right=(0, 0, 255)) -> Image.Image:
    """An RGB image, ``left`` colour on its left half and ``right`` on its right: orientation shows."""
    rgb = np.empty((height, width, 3), np.uint8)
    rgb[:, : width // 2] = left
    rgb[:, width // 2 :] = right
    return Image.fromarray(rgb)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_bomb(width: int = 12_000, height: int = 12_000) -> bytes:
    """A valid 8-bit grayscale PNG of zeros: a few hundred KB that decode to ``width * height`` bytes."""
    packer = zlib.compressobj(9)
    row = bytes(1 + width)  # filter byte + samples
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def raw_png(samples: np.ndarray, bit_depth: int, color_type: int) -> bytes:
    """A PNG written by hand from (H, W[, C]) big-endian samples: depths Pillow does not write (48-bit RGB)."""
    height, width = samples.shape[:2]
    raw = b"".join(b"\0" + row.tobytes() for row in samples)
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")


def png_header_only(width: int, height: int) -> bytes:
    """The signature and IHDR of an RGB PNG of any declared size, no pixel data."""
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))


def two_frames(later_side: int, fmt: str) -> bytes:
    """A two-frame GIF or MPO (multi-picture JPEG) of 64x64 frames whose second frame's header is
    then made to declare ``later_side`` pixels square (its data left as it was)."""
    first, second = halves(64, 64), halves(64, 64, left=(0, 255, 0), right=(255, 255, 0))
    data = bytearray(encode(first, fmt, save_all=True, append_images=[second], **({"optimize": False}
                                                                                  if fmt == "GIF" else {})))
    if fmt == "GIF":  # the last image descriptor: separator, left, top, width, height (little-endian)
        at = data.rfind(b"\x2c" + struct.pack("<HHHH", 0, 0, 64, 64)) + 5
        data[at : at + 4] = struct.pack("<HH", later_side, later_side)
    else:  # the last baseline frame header: marker, length, precision, height, width (big-endian)
        at = data.rfind(b"\xff\xc0") + 5
        data[at : at + 4] = struct.pack(">HH", later_side, later_side)
    return bytes(data)


def image_option(name: str | None) -> dict:
    """A session's ``image`` option for the photo ``name`` (a path, or ``astronaut``: scikit-image's
    portrait); none for no name."""
    if not name:
        return {}
    if name == "astronaut":
        from skimage import data

        raw = encode(Image.fromarray(data.astronaut()), "PNG")
    else:
        raw = Path(name).read_bytes()
    return {"image": base64.b64encode(raw).decode()}
