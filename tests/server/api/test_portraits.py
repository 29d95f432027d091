"""Bundled real portraits as avatars: listed with their licence, served for the picker, streamed as
photo sessions, and their names kept from personal avatars."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from server_helpers import make_settings, running_server, wait_until

from engine.portraits import PORTRAITS, portrait
from server.config import Settings

pytestmark = pytest.mark.usefixtures("one_thread")


async def test_portraits_are_listed_served_and_streamed():
    async with running_server(make_settings(page_avatar=Settings().session.page_avatar)) as srv:
        info = (await srv.http.get("/v1/info")).json()
        listed = {p["name"]: p for p in info["portraits"]}
        assert info["page_avatar"] in listed  # the page starts on a real person, as shipped
        assert list(listed) == [p.name for p in PORTRAITS]
        for p in PORTRAITS:
            assert listed[p.name]["licence"] == p.licence and p.label in listed[p.name]["label"]
            assert listed[p.name]["attribution"]
        assert info["default_avatar"] in info["avatars"] + list(listed)

        res = await srv.http.get(listed["grace_hopper"]["url"])
        assert res.status_code == 200 and res.headers["content-type"] == "image/jpeg"
        assert res.content == portrait("grace_hopper").path.read_bytes()
        missing = await srv.http.get("/v1/portraits/nobody")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_portrait"

        res = await srv.http.post("/v1/sessions", json={"avatar": "grace_hopper"})
        assert res.status_code == 201, res.text
        session = srv.manager.sessions[res.json()["session_id"]]
        await asyncio.wait_for(session.lifecycle.engine_started.wait(), 30)
        assert await wait_until(lambda: session.outbound.engine_bytes() > 0, 10)
        assert (session.height, session.width) == (512, 512)  # a photo session of the portrait

        wrong = await srv.http.post("/v1/sessions", json={"avatar": "nobody"})
        assert wrong.status_code == 400 and "grace_hopper" in wrong.json()["error"]["message"]
        taken = await srv.http.post("/v1/avatars?name=grace_hopper", content=b"\x00" * 64,
                                    headers={"Content-Type": "video/mp4"})
        assert taken.status_code == 409 and taken.json()["error"]["code"] == "avatar_exists"


async def test_a_photo_cut_through_the_mouth_is_refused_with_its_reason(astronaut, astronaut_face):
    import base64

    import cv2

    from engine.face.landmarks import LIPS_OUTER_LOWER

    cut = astronaut[: int(astronaut_face.points(LIPS_OUTER_LOWER)[:, 1].max()) + 2]
    ok, png = cv2.imencode(".png", np.ascontiguousarray(cut[..., ::-1]))
    async with running_server(make_settings()) as srv:
        res = await srv.http.post("/v1/sessions", json={"image": base64.b64encode(png.tobytes()).decode()})
        assert res.status_code == 400 and res.json()["error"]["code"] == "bad_image"
        assert "cropped too tightly" in res.json()["error"]["message"]
        assert not srv.manager.sessions


async def test_a_photo_is_checked_before_a_session_and_shows_its_framing(astronaut, astronaut_crop):
    import cv2

    from engine.media.image import decode_image

    ok, png = cv2.imencode(".png", np.ascontiguousarray(astronaut[..., ::-1]))
    async with running_server(make_settings()) as srv:
        res = await srv.http.post("/v1/photos/framing", content=png.tobytes(), headers={"Content-Type": "image/png"})
        assert res.status_code == 200 and res.headers["content-type"] == "image/jpeg"
        framed = decode_image(res.content, fit=None)
        crop, _ = astronaut_crop
        assert framed.shape == crop.shape and np.abs(framed.astype(int) - crop).mean() < 4  # what a session streams
        blank = cv2.imencode(".png", np.full((300, 300, 3), 120, np.uint8))[1].tobytes()
        res = await srv.http.post("/v1/photos/framing", content=blank, headers={"Content-Type": "image/png"})
        assert res.status_code == 400 and res.json()["error"] == {"code": "bad_image", "message": "no face found"}
        res = await srv.http.post("/v1/photos/framing", content=b"\x89PNG" + bytes(3 << 20))
        assert res.status_code == 413
        assert not srv.manager.sessions


async def test_each_drawn_avatar_has_its_picture_for_the_picker():
    from engine.media.image import decode_image
    from engine.puppet import reference_image

    async with running_server(make_settings()) as srv:
        info = (await srv.http.get("/v1/info")).json()
        assert set(info["avatar_urls"]) == set(info["avatars"])
        for name, url in info["avatar_urls"].items():
            res = await srv.http.get(url)
            assert res.status_code == 200 and res.headers["content-type"] == "image/jpeg"
            picture = decode_image(res.content).astype(np.float64)
            truth = reference_image(name, 128).astype(np.float64)
            assert picture.shape == truth.shape == (128, 128, 3)
            assert np.corrcoef(picture.ravel(), truth.ravel())[0, 1] > 0.98, name
        missing = await srv.http.get("/v1/drawn-avatars/nobody")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_avatar"
