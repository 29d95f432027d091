"""Playback tracking: ``playback.*`` events when an utterance's frames play out, and at an interrupt."""

from __future__ import annotations

import pytest

from server.base.protocol import PlaybackFinished, PlaybackStarted
from server.voice.playback import PlaybackTracker

SR, FPS = 16_000, 25


def test_playback_events_fire_when_frames_play_not_when_fed():
    t = PlaybackTracker(SR, FPS)  # 640 samples a frame
    t.begin("a", 6400)  # frame 10
    t.end("a", 6400 + 640 * 5)  # frames 10..14
    assert t.on_played(9) == []
    (started,) = t.on_played(10)
    assert isinstance(started, PlaybackStarted) and started.pts == pytest.approx(0.4)
    assert t.on_played(13) == []
    (finished,) = t.on_played(17)  # frames 14..16 were dropped: the next one still closes it
    assert isinstance(finished, PlaybackFinished) and not finished.interrupted
    assert finished.pts == pytest.approx(14 / FPS)  # at the utterance's own last frame
    assert t.active == 0


def test_playback_cut_ends_where_feeding_stopped():
    t = PlaybackTracker(SR, FPS)
    t.begin("a", 0)
    t.on_played(0)
    t.cut("a", fed_samples=1000)  # frames 0..1
    (finished,) = t.on_played(1)
    assert finished.interrupted and finished.utterance_id == "a"


def test_back_to_back_utterances_close_before_the_next_starts():
    t = PlaybackTracker(SR, FPS)
    t.begin("a", 0)
    t.end("a", 1000)
    t.begin("b", 1000)
    t.end("b", 2000)
    events = t.on_played(1) + t.on_played(3)
    assert [(type(e).__name__, e.utterance_id) for e in events] == [
        ("PlaybackStarted", "a"), ("PlaybackFinished", "a"), ("PlaybackStarted", "b"), ("PlaybackFinished", "b")]
