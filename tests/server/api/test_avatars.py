"""``/v1/avatars``: a clip uploaded becomes a personal avatar a session can use, and bad uploads
get clear errors with nothing stored."""

from __future__ import annotations

import numpy as np
import pytest
from agent_helpers import append_message, live_session
from personal_helpers import jaw_track, mark_level, portrait_rig, write_footage
from server_helpers import loopback_only, make_settings, running_server, speech_pcm16, wait_until

from engine.face.rig import PhotoRig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "me.mp4"
    write_footage(path, portrait_rig("filippo_giunchedi"), jaw_track(11.0))
    return path.read_bytes()


async def _enrolled(srv, name: str) -> dict:
    """The avatar's state once its enrolment has ended (the in-process server's own record)."""
    jobs = srv.manager.personal.enrolments
    assert await wait_until(lambda: name in jobs and jobs[name].status != "enrolling", 60)
    return (await srv.http.get(f"/v1/avatars/{name}")).json()


async def test_upload_enrol_and_talk_as_the_person(monkeypatch, tmp_path, clip):
    loopback_only(monkeypatch)
    settings = make_settings(avatar_store=str(tmp_path / "store"))
    async with running_server(settings) as srv:
        res = await srv.http.post("/v1/avatars", params={"name": "me"}, content=clip,
                                  headers={"Content-Type": "video/mp4"})
        assert res.status_code == 202, res.text
        assert res.json()["status"] == "enrolling" and res.headers["location"] == "/v1/avatars/me"
        again = await srv.http.post("/v1/avatars", params={"name": "me"}, content=clip,
                                    headers={"Content-Type": "video/mp4"})
        other = await srv.http.post("/v1/avatars", params={"name": "you"}, content=clip,
                                    headers={"Content-Type": "video/mp4"})
        done = await _enrolled(srv, "me")
        assert done["status"] == "ready" and done["coverage"] > 0.9 and done["entries"] >= 8, done
        if again.status_code != 409:  # the first finished before the second arrived: a taken name
            assert again.json()["error"]["code"] == "avatar_exists"
        assert again.status_code == 409 and again.json()["error"]["code"] in ("enrolment_running", "avatar_exists")
        assert other.status_code in (202, 429)  # one enrolment at a time
        if other.status_code == 429:
            assert other.json()["error"]["code"] == "enrolment_busy"
        listing = (await srv.http.get("/v1/avatars")).json()
        assert "me" in [a["name"] for a in listing["avatars"]]
        assert "me" in (await srv.http.get("/v1/info")).json()["personal_avatars"]

        async with live_session(srv, avatar="me") as live:
            ready = live.events.of("session.ready")[0]
            assert (ready["width"], ready["height"]) == (512, 512)
            rate = live.session["sample_rate"]
            await live.events.send(append_message(speech_pcm16(rate)[: 3 * rate], rate, "hi"))
            await live.events.send({"type": "audio.commit"})
            await live.events.wait("playback.finished", "hi", timeout_s=40)
            frames = [rgb for _, _, rgb in live.media.video]
        avatar = srv.manager.personal.store.load("me")
        rig = PhotoRig.from_photo(avatar.image, avatar.face, avatar.mouths)
        marked = 0
        for frame in frames:
            from engine.face.detect import detect_faces
            from engine.face.landmarks import face_landmarks

            boxes = detect_faces(frame)
            if boxes and mark_level(frame, face_landmarks(frame, boxes[0]).landmarks) > 0:
                marked += 1
        assert marked >= 3, "open mouths in the stream are the person's own (the footage's marks)"
        assert rig.mouth.bank.coverage > 0.9

    # A new server on the same store: the avatar is still there.
    async with running_server(make_settings(avatar_store=str(tmp_path / "store"))) as srv:
        assert [a["name"] for a in (await srv.http.get("/v1/avatars")).json()["avatars"]] == ["me"]
        assert (await srv.http.delete("/v1/avatars/me")).status_code == 204
        missing = await srv.http.get("/v1/avatars/me")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_avatar"
        res = await srv.http.post("/v1/sessions", json={"avatar": "me"})
        assert res.status_code == 400 and res.json()["error"]["code"] == "bad_avatar"


async def test_bad_uploads_get_clear_errors_and_store_nothing(monkeypatch, tmp_path, clip):
    import server.api.avatars as avatars_api

    store = tmp_path / "store"
    async with running_server(make_settings(avatar_store=str(store))) as srv:
        post = srv.http.post
        mp4 = {"Content-Type": "video/mp4"}
        bad_name = await post("/v1/avatars", params={"name": "../x"}, content=clip, headers=mp4)
        assert bad_name.status_code == 400 and bad_name.json()["error"]["code"] == "bad_avatar_name"
        bundled = await post("/v1/avatars", params={"name": srv.manager.engine.avatars[0]}, content=clip,
                             headers={"Content-Type": "video/mp4"})
        assert bundled.status_code == 409
        wrong_type = await post("/v1/avatars", params={"name": "x"}, content=b"{}",
                                headers={"Content-Type": "application/json"})
        assert wrong_type.status_code == 415
        empty = await post("/v1/avatars", params={"name": "x"}, content=b"", headers={"Content-Type": "video/mp4"})
        assert empty.status_code == 400 and empty.json()["error"]["code"] == "bad_video"
        monkeypatch.setattr(avatars_api, "MAX_VIDEO_BYTES", 1000)
        big = await post("/v1/avatars", params={"name": "x"}, content=b"\0" * 5000,
                         headers={"Content-Type": "application/octet-stream"})
        assert big.status_code == 413 and big.json()["error"]["code"] == "video_too_large"
        monkeypatch.undo()

        # Not a video: accepted for enrolment, which fails with its one-line reason.
        res = await post("/v1/avatars", params={"name": "junk"}, files={"video": ("a.mp4", b"\0" * 4096, "video/mp4")})
        assert res.status_code == 202, res.text
        failed = await _enrolled(srv, "junk")
        assert failed["status"] == "failed" and "not a video" in failed["error"]["message"]
        assert (await srv.http.get("/v1/avatars")).json()["avatars"] == []
        assert not store.exists() or not [p for p in store.iterdir() if not p.name.startswith(".")]

        # Multipart works for a real clip too.
        res = await post("/v1/avatars", params={"name": "form"}, files={"video": ("me.mp4", clip, "video/mp4")})
        assert res.status_code == 202
        assert (await _enrolled(srv, "form"))["status"] == "ready"


async def test_with_a_server_token_every_call_needs_it(tmp_path, clip):
    settings = make_settings(avatar_store=str(tmp_path / "store"), auth_token="secret")
    async with running_server(settings) as srv:
        for method, path in (("GET", "/v1/avatars"), ("GET", "/v1/avatars/me"), ("DELETE", "/v1/avatars/me")):
            res = await srv.http.request(method, path)
            assert res.status_code == 401 and res.json()["error"]["code"] == "bad_token"
        res = await srv.http.post("/v1/avatars", params={"name": "me"}, content=clip,
                                  headers={"Content-Type": "video/mp4"})
        assert res.status_code == 401
        ok = await srv.http.get("/v1/avatars", headers={"Authorization": "Bearer secret"})
        assert ok.status_code == 200 and ok.json()["avatars"] == []
        assert not np.any([p.exists() for p in [tmp_path / "store" / "me"]])
