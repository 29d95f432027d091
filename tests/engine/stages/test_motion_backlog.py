"""MotionBacklog: which frames a hearing redrawn session can draw, at which read motion."""

from __future__ import annotations

import pytest

from engine.puppet import FaceState
from engine.stages.motion_backlog import MotionBacklog


def motions(first: int, count: int) -> list[FaceState]:
    return [FaceState(yaw=0.01 * (first + k)) for k in range(count)]


def test_a_frame_is_drawn_at_the_motion_read_lag_frames_before_it() -> None:
    backlog = MotionBacklog(lag=3)
    backlog.add(0, motions(0, 4), ["N0"] * 4)
    assert backlog.drawable(heard=100, limit=None) == range(0, 7), "read through 3, lagged by 3"
    drawn, chunks = backlog.take(range(0, 7))
    assert [m.yaw for m in drawn] == pytest.approx([0.0, 0.0, 0.0, 0.0, 0.01, 0.02, 0.03])
    assert chunks == ["N0"] * 7
    assert backlog.drawable(heard=100, limit=None) == range(7, 7), "frame 7 needs frame 4's motion"


def test_drawing_waits_for_the_mouth_the_limit_and_takes_at_most_what_is_asked() -> None:
    backlog = MotionBacklog(lag=6)
    assert backlog.drawable(heard=10, limit=None) == range(0, 0), "nothing read yet"
    backlog.add(0, motions(0, 4), ["N0"] * 4)
    assert backlog.drawable(heard=2, limit=None) == range(0, 2), "only frames whose mouths are heard"
    assert backlog.drawable(heard=10, limit=None, most=1) == range(0, 1)
    assert backlog.drawable(heard=10, limit=5) == range(0, 5), "never past the stream's end"


def test_what_no_later_frame_needs_is_let_go() -> None:
    backlog = MotionBacklog(lag=2)
    for first in range(0, 40, 4):
        backlog.add(first, motions(first, 4), [f"N{first // 4}"] * 4)
        backlog.take(backlog.drawable(heard=10_000, limit=None))
    assert backlog.drawn == 42 and not backlog.motions, "frame 42 waits for frame 40's motion, not read yet"
    backlog.add(40, motions(40, 4), ["N10"] * 4)
    backlog.take(backlog.drawable(heard=10_000, limit=None, most=2))
    assert backlog.drawn == 44 and set(backlog.motions) == {42, 43}, "only what frames 44 on are drawn at"


def test_motions_and_frames_come_in_order() -> None:
    backlog = MotionBacklog(lag=2)
    with pytest.raises(ValueError, match="frame 0 is next"):
        backlog.add(4, motions(4, 4), ["N1"] * 4)
    backlog.add(0, motions(0, 4), ["N0"] * 4)
    backlog.add(9, [], [])  # frames past the stream's end: nothing read
    assert backlog.read == 4
    with pytest.raises(ValueError, match="frame 0 is next"):
        backlog.take(range(1, 2))
    with pytest.raises(ValueError, match="non-negative"):
        MotionBacklog(lag=-1)
