"""A covered mouth is refused; every variant with its lips in view, grey or lit hard, is not."""

import numpy as np
import pytest

from engine.eval.variants import make_variants
from engine.face.checks import find_face
from engine.face.occlusion import MIN_LIP_CONTRAST, MIN_MOUTH_DETAIL, mouth_visibility

IN_VIEW = ["original", "mirror", "grey", "dark", "side light", "tilt 20°", "glasses", "sunglasses", "beard"]


@pytest.fixture(scope="module")
def variants(astronaut):
    return make_variants(astronaut, [*IN_VIEW, "hand"])


def test_the_mouth_in_view_has_detail_and_lip_colour(variants):
    for name in IN_VIEW:
        seen = mouth_visibility(variants[name], find_face(variants[name]))
        assert not seen.covered, (name, seen)
        assert seen.detail > 2 * MIN_MOUTH_DETAIL or seen.lip_contrast > MIN_LIP_CONTRAST * 1.2, (name, seen)
    grey = mouth_visibility(variants["grey"], find_face(variants["grey"]))
    assert grey.detail > 1.0  # no colour to tell the lips by: their detail alone keeps it animated


def test_a_hand_over_the_mouth_takes_both_cues(variants, astronaut):
    """Where the portrait's lips are, the cover leaves neither detail nor lip colour (``find_face``'s
    refusal of it: ``tests/engine/eval/test_variants.py``)."""
    seen = mouth_visibility(variants["hand"], find_face(astronaut))
    assert seen.detail < MIN_MOUTH_DETAIL / 3 and seen.lip_contrast < MIN_LIP_CONTRAST, seen


def test_the_cues_are_read_around_the_face_only(astronaut):
    """A large photo costs what its face does: the astronaut pasted into a wide frame reads the same."""
    face = find_face(astronaut)
    wide = np.full((1536, 2048, 3), 90, np.uint8)
    wide[600:1112, 1200:1712] = astronaut
    a, b = mouth_visibility(astronaut, face), mouth_visibility(wide, face.translated(1200, 600))
    assert abs(a.detail - b.detail) < 0.02 and abs(a.lip_contrast - b.lip_contrast) < 0.5, (a, b)
