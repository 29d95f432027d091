"""A photograph made ready to animate: its head-and-shoulders crop and the face mesh on it.

Made where the photo arrives (the web process, or ``avatar render``), so a photo without a
usable face is refused before any engine work, and sent to the engine whole: the engine
builds the session's ``PhotoRig`` from it and never looks for faces itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.face.checks import FaceError, find_face
from engine.face.crop import crop_face
from engine.face.footage import MouthBank
from engine.face.landmarks import Face

PHOTO_SIZE = 512  # side of a photo avatar's frames

__all__ = ["PHOTO_SIZE", "FaceError", "PhotoAvatar", "photo_avatar"]


@dataclass(frozen=True)
class PhotoAvatar:
    """The (S, S, 3) uint8 crop a photo session's frames are made of and its landmarks in crop
    pixels; a personal avatar (``engine.personal``) also carries the person's own mouth and how
    much they move their head."""

    image: np.ndarray
    face: Face
    mouths: MouthBank | None = None
    sway: float = 1.0  # the head's motion scaled by this: a personal avatar moves as much as its person

    @property
    def frame_size(self) -> tuple[int, int]:
        return int(self.image.shape[0]), int(self.image.shape[1])


def photo_avatar(image: np.ndarray, size: int = PHOTO_SIZE) -> PhotoAvatar:
    """The avatar of the largest face in an (H, W, 3) uint8 photo; ``FaceError`` says why not."""
    crop, face = crop_face(image, find_face(image), size)
    return PhotoAvatar(crop, face)
