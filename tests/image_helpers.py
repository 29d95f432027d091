"""Encoded test images: every format and mode the reference-image decoder meets, and a PNG bomb."""

from __future__ import annotations

import io
import struct
import zlib

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
