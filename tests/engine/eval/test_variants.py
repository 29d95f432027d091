"""The astronaut's variations: drawn where the face mesh says, deterministic, and each one either
animated or refused the way a user's photo would be."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from engine.eval.variants import VARIANTS, make_variants
from engine.face.checks import FaceError, find_face
from engine.face.landmarks import LIPS_INNER_LOWER, LIPS_INNER_UPPER


@pytest.fixture(scope="module")
def variants(astronaut) -> dict[str, np.ndarray]:
    return make_variants(astronaut)


def _changed(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(int) - b.astype(int)).max(-1) > 8


def test_every_variant_is_made_and_deterministic(astronaut, variants):
    assert list(variants) == [v.name for v in VARIANTS]
    again = make_variants(astronaut, ["beard", "glasses"])
    assert np.array_equal(again["beard"], variants["beard"])
    assert np.array_equal(again["glasses"], variants["glasses"])
    assert np.array_equal(variants["original"], astronaut)
    for name, picture in variants.items():
        assert picture.dtype == np.uint8 and picture.ndim == 3, name
        if name != "original":
            assert picture.shape != astronaut.shape or _changed(picture, astronaut).mean() > 0.001, name


def test_drawn_things_sit_where_the_mesh_says(astronaut, astronaut_face, variants):
    face, io = astronaut_face, astronaut_face.interocular
    rows, cols = np.indices(astronaut.shape[:2])

    def near(point: np.ndarray, radius: float) -> np.ndarray:
        return np.hypot(cols - point[0], rows - point[1]) < radius

    eyes = near(face.right_eye_center, 0.9 * io) | near(face.left_eye_center, 0.9 * io)
    glasses = _changed(variants["glasses"], astronaut)
    assert glasses[eyes].mean() > 0.05 and glasses[~(eyes | near(face.xy.mean(0), 1.6 * io))].sum() == 0
    beard = _changed(variants["beard"], astronaut)
    chin = near(face.points([152])[0] + np.array([0, -0.25 * io]), 0.2 * io)
    assert beard[chin].mean() > 0.9
    inner = np.zeros(astronaut.shape[:2], np.uint8)
    cv2.fillPoly(inner, [np.round(np.vstack([face.points(LIPS_INNER_UPPER),
                                              face.points(LIPS_INNER_LOWER)[::-1]])).astype(np.int32)], 1)
    assert inner.sum() > 50 and not beard[inner > 0].any()  # the mouth stays bare: the teeth show
    lips = face.points(LIPS_INNER_UPPER + LIPS_INNER_LOWER).mean(0)
    hand = _changed(variants["hand"], astronaut)
    assert hand[near(lips, 0.3 * io)].mean() > 0.9


@pytest.mark.parametrize("name", ["mirror", "grey", "dark", "side light", "tilt 20°", "double size", "glasses",
                                  "beard"])
def test_variants_a_user_may_bring_are_animated(variants, name):
    face = find_face(variants[name])
    assert face.interocular >= 40


@pytest.mark.parametrize(("name", "reason"), [("half size", "too small"), ("hand", "the mouth is covered")])
def test_variants_that_cannot_talk_are_refused_with_their_reason(variants, name, reason):
    with pytest.raises(FaceError, match=reason):
        find_face(variants[name])
