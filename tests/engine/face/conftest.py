"""Fixtures for the face tests: the astronaut portrait's face, crop and rig (the portrait: tests/conftest.py)."""

from __future__ import annotations

import pytest

from engine.face import PhotoRig, crop_face, find_face


@pytest.fixture(scope="session")
def astronaut_face(astronaut):
    return find_face(astronaut)


@pytest.fixture(scope="session")
def astronaut_crop(astronaut, astronaut_face):
    return crop_face(astronaut, astronaut_face, 512)


@pytest.fixture(scope="session")
def astronaut_rig(astronaut_crop):
    crop, face = astronaut_crop
    return PhotoRig.from_photo(crop, face)
