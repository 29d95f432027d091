"""After ``speak``, the avatar's mouth moves while the utterance plays (real ``tiny`` engine with its
trained weights), measured on the frames an aiortc client receives: mouth openness read by the
model evaluation's probe, and frame change in the mouth region, against the idle frames before it.
The ``playback.*`` events bracket the moving stretch."""

from __future__ import annotations

import time

import numpy as np
import pytest
from agent_helpers import live_session
from server_helpers import VIDEO_HOLD_S, engine_pipeline, loopback_only, make_settings, running_server, wait_until

from engine.avatars import avatar_image
from engine.eval.probe import measure_openness
from engine.photo.crops import mouth_crops

pytestmark = pytest.mark.usefixtures("one_thread")
TEXT = "Hello there. I am a talking avatar, and my lips move when I speak to you."


def mouth_motion(frames: np.ndarray) -> float:
    """Median over frames of the mean absolute change from the previous mouth-region crop (0..1
    scale): the median, so that a few frames a loaded machine's decoder mangles do not read as motion."""
    crops = mouth_crops(frames).numpy()
    return float(np.median(np.abs(np.diff(crops, axis=0)).mean(axis=(1, 2, 3)))) if len(crops) > 1 else 0.0


def frames_between(video: list, t0: float, t1: float) -> np.ndarray:
    return np.stack([rgb for t, _, rgb in video if t0 <= t < t1])


async def test_mouth_moves_while_the_utterance_plays(monkeypatch):
    loopback_only(monkeypatch)
    async with running_server(make_settings()) as srv, live_session(srv, barge_in=False) as live:
        ev = live.events
        session = srv.manager.sessions[live.id]
        assert engine_pipeline("tiny").weights_loaded, "the tiny engine has no trained weights"
        video = live.media.video
        # Idle: the avatar listens, until the client has 3 s of it.
        assert await wait_until(lambda: video and video[-1][0] - video[0][0] >= 3.0, 30)
        t_speak = time.monotonic()
        await ev.send({"type": "speak", "text": TEXT, "utterance_id": "talk"})
        started = await ev.wait("playback.started", "talk")
        finished = await ev.wait("playback.finished", "talk", timeout_s=30)
        t_started, t_finished = ev.at("playback.started", "talk"), ev.at("playback.finished", "talk")
        assert await wait_until(lambda: video[-1][0] > t_finished + VIDEO_HOLD_S + 0.5, 10)  # its last frames are in
        assert not finished["interrupted"]
        media_s = finished["pts"] - started["pts"]
        queued = ev.of("utterance.queued", "talk")[0]["duration_s"]
        assert media_s == pytest.approx(queued, abs=0.2)  # the events bracket exactly the utterance

        # Frames shown while it played (events are sent as its first/last frame is released; the
        # client gets a frame one frame period later) against the idle frames before it.
        hold = VIDEO_HOLD_S
        idle = frames_between(live.media.video, t_speak - 2.5, t_speak)
        talk = frames_between(live.media.video, t_started + hold, t_finished + hold)
        assert len(idle) >= 25 and len(talk) >= 0.6 * 25 * media_s, (len(idle), len(talk), media_s)
        reference = avatar_image(session.avatar, (session.height, session.width))
        open_idle, open_talk = measure_openness(idle, reference), measure_openness(talk, reference)
        move_idle, move_talk = mouth_motion(idle), mouth_motion(talk)
        assert open_talk.max() > open_idle.max() + 0.15, (open_talk.max(), open_idle.max())
        assert open_talk.std() > 2 * open_idle.std() + 0.02, (open_talk.std(), open_idle.std())
        assert move_talk > 2 * move_idle, (move_talk, move_idle)
        print(f"mouth openness idle {open_idle.mean():.2f}±{open_idle.std():.2f}, speaking "
              f"{open_talk.mean():.2f}±{open_talk.std():.2f} (max {open_talk.max():.2f}); mouth change per frame "
              f"idle {move_idle:.4f}, speaking {move_talk:.4f}; speak -> playback.started "
              f"{(t_started - t_speak) * 1000:.0f} ms")
