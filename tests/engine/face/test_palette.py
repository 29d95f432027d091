"""A mouth's colours come from its photo: its eye whites, its lips, its own teeth."""

import numpy as np
import pytest

from engine.face.palette import luminance, mouth_palette


@pytest.fixture(scope="module")
def closed_photo():
    from engine.eval.mouths import portraits
    from engine.photo.avatar import photo_avatar

    image = dict(portraits())["filippo_giunchedi"]
    return photo_avatar(image)


def test_painted_enamel_follows_the_photos_light_and_stays_under_its_eye_whites(closed_photo):
    bright = mouth_palette(closed_photo.image, closed_photo.face.landmarks)
    dim_image = (closed_photo.image.astype(np.float32) * 0.55).astype(np.uint8)
    dim = mouth_palette(dim_image, closed_photo.face.landmarks)
    assert not bright.shows_teeth
    assert luminance(bright.enamel) <= luminance(bright.sclera)
    assert luminance(dim.enamel) <= luminance(dim.sclera)
    # No fixed colour: half the light, about half the enamel.
    assert 0.45 < luminance(dim.enamel) / luminance(bright.enamel) < 0.65
    # A warm cast in the photo warms the teeth too.
    warm = closed_photo.image.astype(np.float32) * np.array([1.0, 0.85, 0.7])
    tinted = mouth_palette(warm.astype(np.uint8), closed_photo.face.landmarks)
    assert tinted.enamel[2] / tinted.enamel[0] < 0.9 * bright.enamel[2] / bright.enamel[0]


def test_a_photo_smiling_on_its_teeth_gives_them_their_own_colour(astronaut_crop):
    crop, face = astronaut_crop
    p = mouth_palette(crop, face.landmarks)
    assert p.shows_teeth
    assert luminance(p.enamel) > luminance(p.lip) + 25
    assert p.brightest_enamel >= luminance(p.enamel)


def test_the_cavity_is_dark_red_never_black(closed_photo, astronaut_crop):
    for image, face in ((closed_photo.image, closed_photo.face), astronaut_crop):
        p = mouth_palette(image, face.landmarks)
        assert 30 <= luminance(p.cavity_deep) < luminance(p.cavity_wall) < luminance(p.lip)
        assert p.cavity_deep[0] > 1.5 * p.cavity_deep[1]  # red, not grey
        assert p.tongue[0] > p.tongue[1] and luminance(p.tongue) > luminance(p.cavity_wall)
