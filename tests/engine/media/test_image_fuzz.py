"""Property-based fuzzing of reference-image decoding: whatever bytes come in, the result is an RGB
frame within the limits or an :class:`ImageError`; no other exception, no oversized decode."""

from __future__ import annotations

import functools
import struct

import numpy as np
from fuzz_budget import fuzz
from hypothesis import given
from hypothesis import strategies as st
from image_helpers import encode, halves, raw_png, two_frames
from PIL import Image

from engine.media.image import ImageError, ImageLimits, ImageTooLarge, check_header, decode_image
from engine.media.image_header import probe

LIMITS = ImageLimits(max_side=512, max_pixels=200_000, min_side=8)
FUZZ = fuzz(150)


@functools.cache
def seeds() -> tuple[bytes, ...]:
    """One real file per format and mode worth mutating."""
    rgb = halves(64, 48)
    noisy = Image.fromarray(np.random.default_rng(3).integers(0, 255, (40, 40, 3), np.uint8))
    frames = [Image.new("RGB", (32, 32), c) for c in ((255, 0, 0), (0, 0, 255))]
    exif = Image.Exif()
    exif[0x0112] = 8
    return (
        encode(rgb, "PNG"),
        encode(noisy.convert("RGBA"), "PNG"),
        encode(rgb, "JPEG", exif=exif),
        encode(rgb.convert("CMYK"), "JPEG"),
        encode(noisy, "JPEG", progressive=True),
        encode(rgb, "WEBP", lossless=True),
        encode(noisy, "WEBP", quality=50),
        encode(frames[0], "WEBP", save_all=True, append_images=frames[1:]),
        encode(rgb.convert("P"), "GIF"),
        encode(frames[0], "GIF", save_all=True, append_images=frames[1:]),
        encode(frames[0], "PNG", save_all=True, append_images=frames[1:]),
        raw_png(np.full((20, 20), 0x1234, ">u2"), 16, 0),
        two_frames(64, "GIF"),
        two_frames(64, "MPO"),  # a multi-picture JPEG: every view's frame header is read
    )


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds())))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "overwrite"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=64))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 64))]
        else:
            patch = draw(st.binary(min_size=1, max_size=8))
            data[pos : pos + len(patch)] = patch
    return bytes(data)


def assert_frame_or_refusal(data: bytes) -> None:
    try:
        rgb = decode_image(data, LIMITS)
    except ImageError:
        return
    assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3
    assert LIMITS.min_side <= min(rgb.shape[:2]) and max(rgb.shape[:2]) <= LIMITS.max_side
    assert rgb.shape[0] * rgb.shape[1] <= LIMITS.max_pixels


@FUZZ
@given(mutated())
def test_mutated_images_decode_within_limits_or_are_refused(data):
    assert_frame_or_refusal(data)


@FUZZ
@given(st.binary(max_size=256), st.sampled_from([b"\x89PNG\r\n\x1a\n", b"\xff\xd8", b"GIF89a", b"RIFF\0\0\0\0WEBP"]))
def test_random_bytes_behind_a_magic_number_are_refused_or_decoded(tail, magic):
    assert_frame_or_refusal(magic + tail)


@FUZZ
@given(st.integers(1, 2**31 - 1), st.integers(1, 2**31 - 1))
def test_declared_png_size_is_read_exactly_and_checked_before_decoding(width, height):
    data = encode(halves(16, 16), "PNG")
    forged = data[:16] + struct.pack(">II", width, height) + data[24:]
    assert (probe(forged).width, probe(forged).height) == (width, height)
    over = width > LIMITS.max_side or height > LIMITS.max_side or width * height > LIMITS.max_pixels
    try:
        check_header(forged, LIMITS)
    except ImageTooLarge:
        assert over
    except ImageError:
        assert not over and min(width, height) < LIMITS.min_side
    else:
        assert not over


@FUZZ
@given(st.integers(0, 2**24 - 1), st.integers(0, 2**24 - 1))
def test_declared_webp_canvas_is_read_exactly(w_minus_1, h_minus_1):
    frames = [Image.new("RGB", (16, 16), c) for c in ((255, 0, 0), (0, 0, 255))]
    data = bytearray(encode(frames[0], "WEBP", save_all=True, append_images=frames[1:]))
    assert data[12:16] == b"VP8X"
    data[24:30] = w_minus_1.to_bytes(3, "little") + h_minus_1.to_bytes(3, "little")
    header = probe(bytes(data))
    assert (header.width, header.height) == (w_minus_1 + 1, h_minus_1 + 1)
    assert_frame_or_refusal(bytes(data))
