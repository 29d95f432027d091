"""Personal avatars from the demo page in a real Chromium: a clip uploaded, and one recorded from
the (fake) camera while the page shows the script, a countdown and the microphone's level (a first
recording cancelled sends nothing), each enrolled, its face shown before use, then animated; the
picker's × deletes one."""

from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest
from browser_helpers import CHROMIUM, chromium
from personal_helpers import jaw_track, portrait_rig, write_footage
from server_helpers import make_settings, running_server, wait_until

from engine.face.rig import FaceMotion, PhotoRig

pytestmark = [
    pytest.mark.browser,
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not shutil.which("chromium") and not os.path.exists(CHROMIUM),
                       reason="Debian chromium is not installed (.ci/run installs it)"),
]


@pytest.fixture(scope="module")
def speaker():
    return portrait_rig("filippo_giunchedi")


def write_y4m(path, rig: PhotoRig, seconds: float, fps: int = 15, side: int = 384) -> None:
    """The rig talking as a raw 4:2:0 Y4M (what Chromium's fake camera plays)."""
    import cv2

    jaw = jaw_track(seconds)[:: 25 // fps]
    with open(path, "wb") as out:
        out.write(f"YUV4MPEG2 W{side} H{side} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for j in jaw:
            rgb = cv2.resize(rig.render(FaceMotion(jaw_open=float(j), talking=1.0)), (side, side),
                             interpolation=cv2.INTER_AREA)
            out.write(b"FRAME\n" + cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420).tobytes())


ACTIVE = "[...document.querySelectorAll('#face-list [aria-checked=true]')].map(b => b.closest('.face').dataset)"


async def _talk_as(page, srv, name: str, shot) -> None:
    await page.wait_for_function("document.querySelector('#enrol-status').textContent.startsWith('Ready')",
                                 timeout=90_000)
    assert await page.evaluate(ACTIVE) == [{"kind": "personal", "name": name}]
    # The enrolled face, as its sessions animate it, is shown before it is used (and on its card).
    for img in ("#enrol-face-img", f".face.personal[data-name='{name}'] img"):
        await page.wait_for_function(f"document.querySelector(\"{img}\")?.naturalWidth === 512", timeout=10_000)
    assert await page.is_visible("#enrol-face-img")
    await page.screenshot(path=str(shot), full_page=True)
    await page.click("#start")
    await page.wait_for_function("(window.avatarDemo.stats.framesDecoded ?? 0) >= 25", timeout=30_000)
    (session,) = srv.manager.sessions.values()
    assert session.avatar == name and (session.height, session.width) == (512, 512)
    assert await page.evaluate("window.avatarDemo.stats.frameWidth") == 512
    await page.click("#stop")
    assert await wait_until(lambda: not srv.manager.sessions, 10)


async def test_a_clip_uploaded_from_the_page_becomes_the_avatar(tmp_path, speaker):
    """On a server that asks for a token (typed into the page): every call, the enrolled face's
    picture on its card included, carries it."""
    clip = tmp_path / "me.mp4"
    write_footage(clip, speaker, jaw_track(11.0))
    settings = make_settings(max_sessions=1, avatar_store=str(tmp_path / "store"), auth_token="s3cret")
    async with running_server(settings) as srv, chromium(tmp_path) as (_, page):
        await page.goto(f"{srv.url}/?mode=mirror")
        await page.fill("#token", "s3cret")
        await page.click("#enrol summary")
        await page.fill("#enrol-name", "me")
        await page.set_input_files("#enrol-file", str(clip))
        await page.click("#enrol-upload")
        await _talk_as(page, srv, "me", tmp_path / "enrolled.png")
        assert "me" in srv.manager.personal.names()
        # Its × deletes it (once confirmed): gone from the picker and the store, another face active.
        page.on("dialog", lambda dialog: dialog.accept())
        await page.click(".face.personal[data-name='me'] .remove")
        await page.wait_for_function("!document.querySelector(\".face.personal[data-name='me']\")")
        assert "me" not in srv.manager.personal.names()
        assert (await page.evaluate(ACTIVE))[0]["kind"] == "drawn"


async def test_a_clip_recorded_from_the_camera_becomes_the_avatar(tmp_path, speaker):
    camera = tmp_path / "camera.y4m"
    write_y4m(camera, speaker, 6.0)
    settings = make_settings(max_sessions=1, avatar_store=str(tmp_path / "store"))
    async with running_server(settings) as srv, chromium(tmp_path, camera=camera) as (_, page):
        await page.goto(f"{srv.url}/?mode=mirror&record_seconds=11")
        await page.click("#enrol summary")
        await page.fill("#enrol-name", "recorded")
        # A first take: the countdown runs, the meter shows the microphone is heard; cancelled, nothing is sent.
        await page.click("#enrol-record")
        await page.wait_for_function("document.querySelector('#enrol-level').value > 0.05", timeout=10_000)
        assert await page.text_content("#enrol-heard") == "your voice is heard"
        assert re.fullmatch(r"\d+ s", await page.text_content("#enrol-countdown"))
        await page.screenshot(path=str(tmp_path / "recording.png"), full_page=True)
        await page.click("#enrol-cancel")
        await page.wait_for_function("document.querySelector('#enrol-status').textContent.includes('cancelled')")
        assert not await page.is_visible("#enrol-live") and not srv.manager.personal.enrolments
        assert srv.manager.personal.names() == []
        await page.click("#enrol-record")
        await page.wait_for_function("!document.querySelector('#enrol-script').hidden", timeout=10_000)
        assert "quick brown fox" in await page.text_content("#enrol-script")
        await _talk_as(page, srv, "recorded", tmp_path / "recorded.png")
        info = srv.manager.personal.store.info("recorded")
        assert info["seconds"] >= 10 and info["entries"] >= 5, info
        assert np.isfinite(info["coverage"])
