"""The ``image`` option of ``POST /v1/sessions``: every failure a 4xx with a clear message, the
decompression bomb refused from its header (no memory spent), user files of every kind handled."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import numpy as np
import pytest
from image_helpers import encode, halves, png_bomb, raw_png, two_frames
from PIL import Image
from server_helpers import make_settings, running_server

from engine.eval.variants import make_variants
from engine.media.image import ImageLimits, decode_image
from engine.photo.avatar import PhotoAvatar
from server.api.engine_adapter import Engine
from server.base.errors import ApiError
from server.base.protocol import SessionCreate
from server.config import InputLimits
from server.session.reference_image import MIN_SIDE, ReferenceImages


class ImageOnlyEngine(Engine):
    """The real image decoding of :class:`Engine`, without engine workers."""

    info = SimpleNamespace(accepts_images=True, config="tiny")

    def __init__(self) -> None:
        pass


def option(data: bytes) -> SessionCreate:
    return SessionCreate(image=base64.b64encode(data).decode())


async def decode(data: bytes, **settings) -> PhotoAvatar | None:
    images = ReferenceImages(ImageOnlyEngine(), InputLimits.model_validate(settings))
    return await images.decode(option(data))


async def rgb_of(data: bytes) -> np.ndarray:
    """What the server decodes a file to, under its default limits, before looking for a face."""
    limits = InputLimits()
    return decode_image(data, ImageLimits(limits.max_image_side, limits.max_image_pixels, MIN_SIDE))


async def refused(data: bytes, **settings) -> ApiError:
    with pytest.raises(ApiError) as error:
        await decode(data, **settings)
    return error.value


async def test_oversized_headers_are_413_with_the_limit_in_the_message():
    error = await refused(png_bomb())
    assert (error.status, error.code) == (413, "image_too_large")
    assert "12000x12000" in error.message and "4096x4096" in error.message and "16.8 Mpixel" in error.message
    error = await refused(encode(halves(300, 200), "PNG"), max_image_side=256)
    assert error.status == 413 and "256x256" in error.message
    error = await refused(encode(halves(300, 200), "PNG"), max_image_pixels=50_000)
    assert error.status == 413 and "0.1 Mpixel" in error.message


async def test_a_multi_frame_file_within_the_limits_decodes_its_first_frame():
    for fmt in ("GIF", "MPO"):
        rgb = await rgb_of(two_frames(64, fmt))
        assert rgb.shape == (64, 64, 3) and rgb[32, 10, 0] > 200 and rgb[32, 10, 1] < 60, fmt  # red, not green


async def test_unusable_images_are_400_bad_image():
    png = encode(Image.fromarray(np.random.default_rng(2).integers(0, 255, (96, 96, 3), np.uint8)), "PNG")
    cases = {
        "truncated": png[: len(png) // 2],
        "corrupt": png[:40] + bytes(200) + png[240:],
        "not an image": b"%PDF-1.7 not an image at all",
        "too small": encode(halves(40, 200), "PNG"),
        "TIFF": encode(halves(), "TIFF"),
    }
    for what, data in cases.items():
        error = await refused(data)
        assert (error.status, error.code) == (400, "bad_image"), what
        assert error.message and "BytesIO" not in error.message, what
    assert "need at least 64x64" in (await refused(cases["too small"])).message
    assert "PNG, JPEG, WebP or GIF" in (await refused(cases["TIFF"])).message


async def test_user_files_of_every_kind_come_out_as_rgb_frames():
    exif = Image.Exif()
    exif[0x0112] = 6
    frames = [Image.new("RGB", (100, 100), c) for c in ((255, 0, 0), (0, 0, 255))]
    rgba = np.zeros((100, 100, 4), np.uint8)
    rgba[..., 1] = 200
    cases = {
        "exif-rotated": (encode(halves(160, 100), "JPEG", exif=exif), (160, 100)),
        "cmyk": (encode(halves(160, 100).convert("CMYK"), "JPEG"), (100, 160)),
        "16-bit gray": (raw_png(np.full((100, 100), 0x8000, ">u2"), 16, 0), (100, 100)),
        "gray": (encode(Image.new("L", (100, 100), 90), "PNG"), (100, 100)),
        "alpha": (encode(Image.fromarray(rgba), "PNG"), (100, 100)),
        "animated gif": (encode(frames[0], "GIF", save_all=True, append_images=frames[1:]), (100, 100)),
        "animated webp": (encode(frames[0], "WEBP", save_all=True, append_images=frames[1:]), (100, 100)),
        "big": (encode(halves(3000, 2000), "JPEG"), (1024, 1536)),  # fitted: the session holds 4.5 MB, not 18
    }
    for what, (data, shape) in cases.items():
        rgb = await rgb_of(data)
        assert rgb.shape == (*shape, 3) and rgb.dtype == np.uint8, what
    assert (await rgb_of(cases["16-bit gray"][0]) == 0x80).all()
    assert (await rgb_of(cases["alpha"][0]))[50, 50].tolist() == [255, 255, 255]  # transparent: over white
    assert (await rgb_of(cases["animated gif"][0]))[50, 50].tolist() == [255, 0, 0]  # the first frame
    for what in ("gray", "alpha", "big"):
        error = await refused(cases[what][0])
        assert (error.status, error.code, error.message) == (400, "bad_image", "no face found"), what


async def test_a_portrait_becomes_a_photo_avatar_and_faces_that_cannot_be_animated_are_400(astronaut):
    photo = await decode(encode(Image.fromarray(astronaut), "JPEG"))
    assert photo.image.shape == (512, 512, 3) and photo.face.landmarks.shape == (468, 3)
    eyes = (photo.face.right_eye_center + photo.face.left_eye_center) / 2
    assert 150 < eyes[1] < 260 and 200 < eyes[0] < 310, "the face framed head and shoulders"
    small = Image.fromarray(astronaut).resize((358, 358), Image.Resampling.BOX)  # eyes 30 px apart
    error = await refused(encode(small, "PNG"))
    assert (error.status, error.code) == (400, "bad_image") and "too small" in error.message, error.message
    covered = Image.fromarray(make_variants(astronaut, ["hand"])["hand"])
    error = await refused(encode(covered, "JPEG"))
    assert (error.status, error.code) == (400, "bad_image") and "mouth is covered" in error.message, error.message


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.usefixtures("one_thread")
async def test_the_png_bomb_is_refused_by_the_server_without_memory_growth():
    bomb = base64.b64encode(png_bomb()).decode()
    async with running_server(make_settings()) as srv:
        before = rss_bytes()
        for _ in range(4):
            res = await srv.http.post("/v1/sessions", json={"image": bomb})
            assert res.status_code == 413, res.text
            assert res.json()["error"]["code"] == "image_too_large"
            assert "4096x4096" in res.json()["error"]["message"]
        assert rss_bytes() - before < 50 * 2**20  # decoded, one bomb is 144 MB (432 MB as RGB)
        for data, side in ((two_frames(20_000, "GIF"), 20_000), (two_frames(60_000, "MPO"), 60_000)):
            res = await srv.http.post("/v1/sessions", json={"image": base64.b64encode(data).decode()})
            assert res.status_code == 413, res.text  # a later frame's declared size counts as the first's
            assert res.json()["error"]["code"] == "image_too_large"
            assert f"{side}x{side}" in res.json()["error"]["message"]
        assert (await srv.http.get("/healthz")).json()["sessions"] == 0
