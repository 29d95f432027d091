"""The shipped motion reader reads the motion of puppet faces it never saw (held-out identities)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.photo.reader import read_motion, reference_crops
from engine.train.frame_readers import HELD_OUT_SEED, puppet_frames

pytestmark = pytest.mark.usefixtures("one_thread")


def test_reader_follows_mouth_and_head_of_new_faces() -> None:
    frames, refs, states = puppet_frames(range(HELD_OUT_SEED + 500, HELD_OUT_SEED + 506), 12, seed=7)
    read = []
    for k in range(len(refs)):
        read += read_motion(frames[k * 12:(k + 1) * 12], refs[k])
    for name, floor in (("openness", 0.9), ("blink", 0.8), ("yaw", 0.8), ("pitch", 0.8), ("roll", 0.8), ("tx", 0.8),
                        ("brow", 0.3), ("gaze_x", 0.7), ("gaze_y", 0.5)):
        truth = np.array([getattr(s, name) for s in states])
        got = np.array([getattr(s, name) for s in read])
        r = np.corrcoef(truth, got)[0, 1]
        assert r >= floor, (name, r)
    closed = [r.openness for r, s in zip(read, states, strict=True) if s.openness == 0]
    assert closed and np.median(closed) < 0.12, "a closed mouth reads as closed"


def test_per_frame_references_read_the_same_as_one_and_as_crops_made_once() -> None:
    frames, refs, _ = puppet_frames(range(HELD_OUT_SEED + 600, HELD_OUT_SEED + 601), 4, seed=3)
    one = read_motion(frames, refs[0])
    each = read_motion(frames, np.repeat(refs, 4, axis=0))
    cropped = read_motion(frames, reference_crops(refs), repeats=torch.tensor([4]))
    assert [s.openness for s in one] == pytest.approx([s.openness for s in each], abs=1e-4)
    assert [s.openness for s in one] == pytest.approx([s.openness for s in cropped], abs=1e-4)
