"""Drawn sessions through the server: a bundled avatar drawn by its renderer at the generated
motion reaches an aiortc viewer sharper than the decoder's frames of the same speech; servers draw
by default, and a session can ask for the decoder's frames."""

from __future__ import annotations

import numpy as np
import pytest
from agent_helpers import append_message, live_session
from server_helpers import loopback_only, make_settings, running_server, speech_pcm16, wait_until

from engine.puppet import reference_image

pytestmark = pytest.mark.usefixtures("one_thread")


async def speaking_frames(srv, **create) -> np.ndarray:
    """The frames a viewer receives while the session says 3 s of speech."""
    async with live_session(srv, avatar="ada", **create) as live:
        assert live.session["drawn"] is create.get("drawn", True), "the answer says how the avatar is drawn"
        assert await wait_until(lambda: len(live.media.video) >= 10, 30)
        rate = live.session["sample_rate"]
        await live.events.send(append_message(speech_pcm16(rate)[: 3 * rate], rate, "hello"))
        await live.events.send({"type": "audio.commit"})
        await live.events.wait("playback.finished", "hello", timeout_s=30)
        return np.stack([rgb for _, _, rgb in live.media.video][-75:])


def edges(frames: np.ndarray) -> float:
    grey = frames.astype(np.float32).mean(-1)
    return float(np.abs(np.diff(grey, axis=1)).mean() + np.abs(np.diff(grey, axis=2)).mean())


async def test_a_drawn_session_is_the_avatar_drawn_sharp_and_a_session_can_ask_for_the_decoder(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(make_settings()) as srv:  # the default: bundled avatars drawn
        drawn = await speaking_frames(srv)
        decoded = await speaking_frames(srv, drawn=False)
    assert drawn.shape[1:] == decoded.shape[1:] == (256, 256, 3)
    assert edges(drawn) > 1.1 * edges(decoded), (edges(drawn), edges(decoded))
    rest = reference_image("ada", 256).astype(np.float32)
    mouth = (slice(None), slice(150, 215), slice(88, 168))
    change = np.abs(drawn.astype(np.float32) - rest)[mouth].mean(axis=(1, 2, 3))
    assert change.max() > 2 * change.min() + 3, "the drawn mouth moved while the speech played"
