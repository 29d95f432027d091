"""PuppetRig: a read face state is drawn as the renderer draws the track it came from."""

from __future__ import annotations

import numpy as np
import pytest

from engine.puppet import FaceState, get_identity, render
from engine.puppet.rig import PuppetRig, drawable


def test_a_read_state_is_drawn_with_the_shape_weights_the_renderer_gives_it() -> None:
    shut = drawable(FaceState(openness=-0.02, closed=0.0, blink=-0.1))
    assert (shut.openness, shut.closed, shut.open, shut.blink) == (0.0, 1.0, 0.0, 0.0)
    half = drawable(FaceState(openness=0.125, wide=0.3, rounded=0.4))
    assert half.closed == pytest.approx(0.5) and half.wide == pytest.approx(0.3)
    assert half.rounded == pytest.approx(0.2) and half.open == pytest.approx(0.0)
    wide_open = drawable(FaceState(openness=0.8, wide=0.6, rounded=0.1, blink=1.3))
    weights = wide_open.shape_weights()
    assert weights.sum() == pytest.approx(1.0) and wide_open.closed == 0.0 and wide_open.blink == 1.0
    assert wide_open.open == pytest.approx(0.3)


def test_brows_and_gaze_are_drawn_as_read_within_their_ranges() -> None:
    state = drawable(FaceState(brow=1.4, gaze_x=-0.5, gaze_y=-1.2))
    assert (state.brow, state.gaze_x, state.gaze_y) == (1.0, -0.5, -1.0)
    ada = get_identity("ada")
    rig = PuppetRig(ada, 256)
    raised, rest = rig.draw(FaceState(brow=1.0)), rig.draw(FaceState())
    assert np.array_equal(rest, render(ada, drawable(FaceState()), 256))
    eyes = (slice(70, 140), slice(60, 196))
    assert np.abs(raised[eyes].astype(np.int16) - rest[eyes]).mean() > 1.0, "raised brows are drawn raised"
    mouth = (slice(160, 220), slice(80, 176))
    assert np.array_equal(raised[mouth], rest[mouth]), "the brows move nothing below the eyes"
