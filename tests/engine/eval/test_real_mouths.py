"""Lip sync against real mouths: the real clips load with their audio, the face mesh reads a
talking mouth on them, the closure and lag scores count what they say they count, and the drawn
avatars' mouths, read off their frames, follow a real speaker better than loudness does."""

from __future__ import annotations

import dataclasses

import numpy as np

from engine.avatars import DEFAULT_AVATAR
from engine.eval.envelope import loudness_envelope
from engine.eval.real import (
    HELD_OUT,
    REAL_DIR,
    DrawnAvatar,
    best_lag,
    closures,
    closures_matched,
    format_real_table,
    lip_gaps,
    load_real_clip,
    opening_range,
    real_clips,
    score_drawn,
    score_series,
    summary,
)
from engine.pipeline import Pipeline
from engine.presets import Preset
from engine.puppet import get_identity, openness_series

SR, FPS = 16000, 25


def _talking(n: int = 100) -> np.ndarray:
    """A lip gap that opens and closes: short closures at frames 20, 45 and 70, a pause from 85."""
    gap = 0.3 + 0.1 * np.sin(np.arange(n) * 0.9)
    for start in (20, 45, 70):
        gap[start:start + 3] = 0.0
    gap[85:] = 0.02
    return gap


def test_the_set_names_its_sources_and_its_held_out_speakers() -> None:
    names = [p.stem for p in real_clips()]
    assert len(names) >= 6 and set(HELD_OUT) <= set(names)
    sources = (REAL_DIR / "SOURCES.md").read_text()
    for name in names:
        assert f"`{name}.mp4`" in sources  # every clip's repository, path, commit and licence


def test_a_real_clip_talks_and_its_audio_matches_its_frames() -> None:
    clip = load_real_clip(REAL_DIR / "retalk5.mp4", SR, FPS)
    assert clip.frames.shape[0] == round(clip.seconds * FPS) and clip.pcm.size == len(clip.frames) * SR // FPS
    gap = lip_gaps(clip.frames[:50])
    assert gap.shape == (50,) and np.all(gap >= 0)
    assert opening_range(gap) > 0.05  # the mouth moves: a talking person, read by the mesh
    heard = openness_series(clip.pcm, SR, FPS)
    assert heard.max() > 0.3  # and the audio is speech


def test_closures_are_short_runs_of_meeting_lips_not_pauses() -> None:
    gap = _talking()
    assert closures(gap) == [(20, 23), (45, 48), (70, 73)]  # the pause at the end is not a closure
    assert closures_matched(gap, gap, 0) == (3, 3)
    never = 0.3 + 0.1 * np.sin(np.arange(100) * 0.9)
    assert closures_matched(gap, never, 0)[0] == 0  # a mouth that never meets its lips closes none
    late = np.roll(gap, 5)  # closing 200 ms late misses them, unless scored at its lag
    assert closures_matched(gap, late, 0)[0] == 0 and closures_matched(gap, late, 5) == (3, 3)


def test_best_lag_finds_a_late_mouth() -> None:
    gap = _talking()
    r, lag = best_lag(np.roll(gap, 2), gap)
    assert lag == 2 and r > 0.95
    assert best_lag(-gap, gap)[0] < 0.2


def test_the_envelope_follows_loudness_not_words() -> None:
    t = np.arange(2 * SR) / SR
    hum = (0.5 * np.sin(2 * np.pi * 120 * t)).astype(np.float32)  # a loud "mmm": lips shut, audio loud
    env = loudness_envelope(hum, SR, FPS)
    assert env.shape == (50,) and env[5:].min() > 0.8  # what a loudness-driven mouth would do: open wide
    assert loudness_envelope(np.zeros(SR, np.float32), SR, FPS).max() == 0.0


def test_the_drawn_avatars_mouths_follow_a_real_speaker_better_than_loudness() -> None:
    whole = load_real_clip(REAL_DIR / "retalk3.mp4", SR, FPS)
    clip = dataclasses.replace(whole, frames=whole.frames[:150], pcm=whole.pcm[:150 * SR // FPS])  # 6 s
    real = lip_gaps(clip.frames)
    envelope = score_series(loudness_envelope(clip.pcm, SR, FPS), real)["r"]
    drawn = DrawnAvatar.bundled(Pipeline.from_config("tiny").preset(Preset.FAST), get_identity(DEFAULT_AVATAR))
    assert [d.label for d in drawn] == ["drawn", "puppet"]
    scores = {}
    for avatar in drawn:
        opening = avatar.opening(clip)
        assert len(opening) == len(real) and opening.max() - opening.min() > 0.2  # a talking drawn mouth
        scores[avatar.label] = score_drawn(opening, real)
        assert scores[avatar.label]["r"] > envelope + 0.1, (avatar.label, scores[avatar.label], envelope)
        assert abs(scores[avatar.label]["lag"]) <= 2
        assert scores[avatar.label]["closures"]["real"] >= 1
    still = score_drawn(np.full(len(real), 0.3), real)  # a mouth that never moves
    assert still["closures"]["closed"] == 0
    row = {"name": "retalk3", "held_out": False, "avatar": {"r": 0.6, "lag": 0}, "envelope": {"r": envelope, "lag": 0},
           "heard": {"r": 0.6, "lag": 0}, "closures": {"closed": 1, "real": 2, "share": 0.5},
           "range": {"ratio": 1.0}, **scores}
    means = summary([row])
    assert means["drawn_r"] == scores["drawn"]["r"] and means["puppet_r"] == scores["puppet"]["r"]
    table = format_real_table({"clips": [row], "tuning": means, "held_out": {}})
    assert "puppet r, closures" in table and f"{scores['puppet']['r']:.3f}" in table
