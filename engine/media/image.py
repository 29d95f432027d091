"""Reference images: size checked from the header before decoding, then decoded to RGB uint8.

A 400 KB PNG can declare 12,000 x 12,000 pixels and decode to gigabytes, so the declared size is
read first (:mod:`engine.media.image_header`) and refused over the limits before any decoder
runs; decoding then costs at most ``max_pixels`` x 4 bytes (plus a conversion copy). Whatever the
file holds comes out as one (H, W, 3) uint8 frame: the first frame of an animation, EXIF
orientation applied, CMYK and palette converted, 16-bit samples reduced to 8, transparency
composited over white. Large images are downscaled to ``fit`` on their shorter side (the engine
crops and resizes to its frame size anyway), so what a session holds stays small.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from engine.media.image_header import ImageError, ImageHeader, probe

__all__ = ["FIT_SHORT_SIDE", "ImageError", "ImageLimits", "ImageTooLarge", "check_header", "decode_image",
           "load_image"]

FIT_SHORT_SIDE = 1024  # above every engine config's frame size, with room for its crop
WHITE = (255, 255, 255, 255)
SIXTEEN_BIT_GRAY = frozenset({"I", "I;16", "I;16B", "I;16L", "I;16N"})
# What Pillow raises on corrupt or truncated data, beyond our own checks.
DECODER_ERRORS = (OSError, ValueError, SyntaxError, EOFError, IndexError, KeyError, TypeError, struct.error,
                  zlib.error, Image.DecompressionBombError)


class ImageTooLarge(ImageError):
    """The header declares more pixels than the limits allow; nothing was decoded."""


@dataclass(frozen=True)
class ImageLimits:
    max_side: int = 4096
    max_pixels: int = 4096 * 4096
    min_side: int = 1

    def check(self, width: int, height: int) -> None:
        if width > self.max_side or height > self.max_side or width * height > self.max_pixels:
            raise ImageTooLarge(
                f"image is {width}x{height} ({width * height / 1e6:.1f} Mpixel); the limit is "
                f"{self.max_side}x{self.max_side} and {self.max_pixels / 1e6:.1f} Mpixel"
            )
        if min(width, height) < self.min_side:
            raise ImageError(f"{width}x{height} pixels; need at least {self.min_side}x{self.min_side}")


def check_header(data: bytes, limits: ImageLimits) -> ImageHeader:
    """The image's format and declared size, refused (:class:`ImageTooLarge`) over ``limits``, as
    is a file any later frame of which declares a size over them."""
    header = probe(data)
    limits.check(header.width, header.height)
    for width, height in header.frames:
        limits.check(max(width, header.width), max(height, header.height))
    return header


def decode_image(data: bytes, limits: ImageLimits | None = None, fit: int | None = FIT_SHORT_SIDE,
                 name: str = "image") -> np.ndarray:
    """Encoded PNG/JPEG/WebP/GIF bytes -> (H, W, 3) uint8; :class:`ImageError` if unusable."""
    limits = limits or ImageLimits()
    try:
        header = check_header(data, limits)
    except ImageTooLarge:
        raise
    except ImageError as exc:
        raise ImageError(f"{name}: {exc}") from None
    try:
        with Image.open(io.BytesIO(data), formats=[header.format]) as im:
            limits.check(*im.size)  # a GIF frame can reach past the screen its header declares
            if fit is not None and header.format == "JPEG":
                im.draft(None, _scaled(im.size, fit))  # DCT scaling: a big JPEG decodes small
            im.load()
            return _fitted(_to_rgb(ImageOps.exif_transpose(im)), fit)
    except ImageError:
        raise
    except DECODER_ERRORS as exc:
        raise ImageError(f"{name}: corrupt or truncated {header.format} data ({_reason(exc)})") from None


def load_image(path: str | Path, limits: ImageLimits | None = None, fit: int | None = FIT_SHORT_SIDE) -> np.ndarray:
    """An image file -> (H, W, 3) uint8 (``avatar render --image``)."""
    path = Path(path)
    if not path.is_file():
        raise ImageError(f"image file not found: {path}")
    return decode_image(path.read_bytes(), limits, fit, str(path))


def _reason(exc: Exception) -> str:
    if "truncated" in str(exc):
        return "truncated"
    if isinstance(exc, Image.UnidentifiedImageError):  # its message names a BytesIO object
        return "unrecognised data"
    return str(exc)[:120] or exc.__class__.__name__


def _scaled(size: tuple[int, int], fit: int) -> tuple[int, int]:
    """``size`` scaled so its shorter side is ``fit`` (never enlarged)."""
    scale = min(1.0, fit / min(size))
    return max(1, round(size[0] * scale)), max(1, round(size[1] * scale))


def _to_rgb(im: Image.Image) -> Image.Image:
    if im.mode in SIXTEEN_BIT_GRAY:  # Pillow's own conversion clips 16-bit samples instead of scaling
        gray = (np.clip(np.asarray(im, dtype=np.int64), 0, 65535) >> 8).astype(np.uint8)
        return Image.fromarray(gray).convert("RGB")
    if im.mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info:
        rgba = im.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, WHITE), rgba).convert("RGB")
    return im.convert("RGB")


def _fitted(im: Image.Image, fit: int | None) -> np.ndarray:
    if fit is not None and min(im.size) > fit:
        im = im.resize(_scaled(im.size, fit), Image.Resampling.LANCZOS, reducing_gap=2.0)
    return np.array(im, dtype=np.uint8)


def encode_jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:
    """(H, W, 3) uint8 RGB -> JPEG bytes (a preview of what a photo session streams)."""
    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb)).save(out, format="JPEG", quality=quality)
    return out.getvalue()
