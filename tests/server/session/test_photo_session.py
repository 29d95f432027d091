"""A photo session through the server: an aiortc viewer receives the photograph itself, 512x512,
its mouth moving with the speech the session is given."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from agent_helpers import append_message, live_session
from PIL import Image
from server_helpers import loopback_only, make_settings, running_server, speech_pcm16, wait_until

from engine.photo.avatar import photo_avatar

pytestmark = pytest.mark.usefixtures("one_thread")


def jpeg(rgb: np.ndarray) -> str:
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, "JPEG", quality=92)
    return base64.b64encode(out.getvalue()).decode()


async def test_a_viewer_receives_the_photo_talking(monkeypatch, astronaut):
    loopback_only(monkeypatch)
    photo = photo_avatar(astronaut)
    async with running_server(make_settings()) as srv:
        async with live_session(srv, image=jpeg(astronaut)) as live:
            ready = live.events.of("session.ready")[0]
            assert (ready["width"], ready["height"]) == (512, 512)
            assert await wait_until(lambda: len(live.media.video) >= 20, 30)
            idle = len(live.media.video)
            speech = speech_pcm16(live.session["sample_rate"])[: 3 * live.session["sample_rate"]]
            await live.events.send(append_message(speech, live.session["sample_rate"], "hello"))
            await live.events.send({"type": "audio.commit"})
            await live.events.wait("playback.finished", "hello", timeout_s=30)
            frames = [rgb for _, _, rgb in live.media.video]
    assert all(f.shape == (512, 512, 3) for f in frames)
    still = ~moving_region(photo)
    errors = [float(np.abs(f.astype(int) - photo.image)[still].mean()) for f in frames[-60:]]
    assert max(errors) < 12, "outside the moving face: the photo itself (VP8 noise aside)"
    # Against the served face at rest (the frames before the speech), not the photo: the rest
    # mouth itself is drawn (lips brought together), and a loaded machine may hold a frame.
    mouth = mouth_box(photo)
    rest = np.mean([f[mouth] for f in frames[idle - 10:idle]], axis=0)
    still_mouth = [float(np.abs(f[mouth] - rest).mean()) for f in frames[idle - 10:idle]]
    talking = [float(np.abs(f[mouth] - rest).mean()) for f in frames[idle:]]
    assert max(still_mouth) < 4, "at rest the mouth holds still (VP8 noise aside)"
    assert max(talking) > max(still_mouth) + 8, "the mouth moved while the speech played"


def moving_region(photo) -> np.ndarray:
    from engine.face.rig import PhotoRig

    return PhotoRig.from_photo(photo.image, photo.face).motion_region


def mouth_box(photo) -> tuple[slice, slice]:
    x, y = photo.face.mouth_center
    w = photo.face.mouth_width
    return slice(int(y - 0.3 * w), int(y + 0.6 * w)), slice(int(x - 0.6 * w), int(x + 0.6 * w))
