"""Reference-image decoding: sizes refused from the header before any decoder runs, and every
format and mode a user's file can come in either decoded to the right RGB frame or refused clearly."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
from image_helpers import encode, halves, png_bomb, png_header_only, raw_png
from PIL import Image

from engine.media import image as image_module
from engine.media.image import ImageError, ImageLimits, ImageTooLarge, check_header, decode_image, load_image
from engine.media.image_header import probe

RED, BLUE = (255, 0, 0), (0, 0, 255)


def assert_close(pixel: np.ndarray, rgb: tuple[int, int, int], tol: int = 12) -> None:
    assert np.abs(pixel.astype(int) - rgb).max() <= tol, (pixel, rgb)


@pytest.mark.parametrize(
    ("fmt", "options"),
    [("PNG", {}), ("JPEG", {"quality": 95}), ("WEBP", {"lossless": True}), ("WEBP", {"quality": 90}),
     ("GIF", {})],
)
def test_probe_reads_the_declared_size_of_every_format(fmt, options):
    data = encode(halves(123, 45), fmt, **options)
    header = probe(data)
    assert (header.format, header.width, header.height) == (fmt, 123, 45)
    rgb = decode_image(data)
    assert rgb.shape == (45, 123, 3) and rgb.dtype == np.uint8
    assert_close(rgb[20, 10], RED, 40)  # GIF and lossy WebP quantise a little
    assert_close(rgb[20, 110], BLUE, 40)


def test_a_png_bomb_is_refused_from_its_header_without_decoding(monkeypatch):
    bomb = png_bomb()
    assert len(bomb) < 500_000  # a few hundred KB on the wire, 144 MB decoded
    monkeypatch.setattr(image_module.Image, "open", lambda *a, **k: pytest.fail("the decoder was reached"))
    t0 = time.perf_counter()
    with pytest.raises(ImageTooLarge) as refused:
        decode_image(bomb)
    assert "12000x12000" in str(refused.value) and "4096x4096" in str(refused.value)
    assert "16.8 Mpixel" in str(refused.value)
    assert time.perf_counter() - t0 < 0.5


@pytest.mark.parametrize(
    ("width", "height", "refused"),
    [(4096, 4096, False), (4097, 10, True), (10, 4097, True), (4096, 4097, True), (64, 64, False)],
)
def test_side_and_pixel_limits(width, height, refused):
    limits = ImageLimits()
    if refused:
        with pytest.raises(ImageTooLarge):
            check_header(png_header_only(width, height), limits)
    else:
        assert check_header(png_header_only(width, height), limits).pixels == width * height
    with pytest.raises(ImageTooLarge, match="1.0 Mpixel"):  # a tighter pixel budget than sides allow
        check_header(png_header_only(2000, 1000), ImageLimits(max_side=4096, max_pixels=1_000_000))


def test_too_small_is_a_plain_image_error_from_the_header():
    with pytest.raises(ImageError, match="need at least 64x64") as refused:
        check_header(png_header_only(40, 200), ImageLimits(min_side=64))
    assert not isinstance(refused.value, ImageTooLarge)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF"])
def test_truncated_images_are_refused(fmt):
    data = encode(Image.fromarray(np.random.default_rng(1).integers(0, 255, (96, 96, 3), np.uint8)), fmt)
    for cut in (10, 30, len(data) // 2, len(data) - 60):  # the last bytes of a PNG can be checksums only
        with pytest.raises(ImageError):
            decode_image(data[:cut])


def test_corrupt_and_foreign_data_is_refused_with_a_clear_message():
    with pytest.raises(ImageError, match="not a PNG, JPEG, WebP or GIF"):
        decode_image(b"hello, not an image")
    with pytest.raises(ImageError, match="not a PNG, JPEG, WebP or GIF"):
        decode_image(encode(halves(), "BMP"))
    png = bytearray(encode(halves(), "PNG"))
    png[60:80] = bytes(20)  # inside the compressed pixel data
    with pytest.raises(ImageError, match="corrupt or truncated PNG") as refused:
        decode_image(bytes(png))
    assert "BytesIO" not in str(refused.value)


def test_exif_orientation_is_applied():
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown rotated 90 degrees clockwise
    rgb = decode_image(encode(halves(120, 80), "JPEG", exif=exif, quality=95))
    assert rgb.shape == (120, 80, 3)
    assert_close(rgb[10, 40], RED)  # the stored left half is now on top
    assert_close(rgb[110, 40], BLUE)


def test_cmyk_grayscale_and_palette_become_rgb():
    cmyk = decode_image(encode(halves().convert("CMYK"), "JPEG", quality=95))
    assert_close(cmyk[40, 10], RED, 20) and assert_close(cmyk[40, 110], BLUE, 20)
    gray = decode_image(encode(Image.new("L", (70, 70), 77), "PNG"))
    assert gray.shape == (70, 70, 3) and (gray == 77).all()
    bits = decode_image(encode(Image.new("1", (70, 70), 1), "PNG"))
    assert (bits == 255).all()
    palette = decode_image(encode(halves().convert("P"), "PNG"))
    assert_close(palette[40, 10], RED) and assert_close(palette[40, 110], BLUE)


def test_sixteen_bit_samples_are_scaled_not_clipped():
    gray16 = Image.fromarray(np.full((70, 70), 0xABCD, np.uint16))
    data = encode(gray16, "PNG")
    assert data[24] == 16  # the IHDR bit depth: a real 16-bit file
    assert (decode_image(data) == 0xAB).all()
    rgb16 = np.zeros((70, 70, 3), ">u2")
    rgb16[..., 0] = 0xFF00
    assert_close(decode_image(raw_png(rgb16, 16, 2))[5, 5], RED, 1)


def test_transparency_is_composited_over_white():
    rgba = np.zeros((70, 70, 4), np.uint8)
    rgba[:, :35] = (255, 0, 0, 255)  # opaque red left, fully transparent right
    rgb = decode_image(encode(Image.fromarray(rgba), "PNG"))
    assert_close(rgb[30, 5], RED, 0) and assert_close(rgb[30, 60], (255, 255, 255), 0)
    la = decode_image(encode(Image.fromarray(rgba[..., [0, 3]]).convert("LA"), "PNG"))
    assert la.shape == (70, 70, 3) and (la[:, 40:] == 255).all()
    webp = decode_image(encode(Image.fromarray(rgba), "WEBP", lossless=True))
    assert_close(webp[30, 60], (255, 255, 255), 0)


@pytest.mark.parametrize("fmt", ["GIF", "PNG", "WEBP"])
def test_animations_give_their_first_frame(fmt):
    frames = [Image.new("RGB", (80, 80), c) for c in (RED, (0, 255, 0), BLUE)]
    data = encode(frames[0], fmt, save_all=True, append_images=frames[1:], duration=40, loop=0)
    assert Image.open(io.BytesIO(data)).n_frames == 3
    assert_close(decode_image(data)[40, 40], RED, 8)


def test_large_images_come_out_fitted_to_a_short_side_and_jpeg_decodes_reduced():
    big = halves(3000, 2000)
    png = decode_image(encode(big, "PNG"), fit=500)
    assert png.shape == (500, 750, 3)
    assert_close(png[250, 10], RED) and assert_close(png[250, 740], BLUE)
    jpeg = decode_image(encode(big, "JPEG"), fit=500)
    assert jpeg.shape == (500, 750, 3)
    assert decode_image(encode(big, "PNG"), fit=None).shape == (2000, 3000, 3)


def test_load_image_reads_files_and_refuses_missing_ones(tmp_path):
    (tmp_path / "a.webp").write_bytes(encode(halves(), "WEBP"))
    assert load_image(tmp_path / "a.webp").shape == (80, 120, 3)
    with pytest.raises(ImageError, match="not found"):
        load_image(tmp_path / "missing.png")
    with pytest.raises(ImageError, match="not found"):
        load_image(tmp_path)
