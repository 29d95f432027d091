"""Find the one face to animate in a photograph, or say in a few words why there is none.

``find_face`` runs the detector and the face mesh and refuses what the photo rig cannot
animate: no face, a face too small (eyes closer than ``MIN_INTEROCULAR`` pixels), a
face turned too far from the camera (estimated yaw beyond ``MAX_YAW_DEGREES``), or a face
whose mouth is covered (``engine.face.occlusion``).
"""

from __future__ import annotations

import numpy as np

from engine.face.detect import ZOOMS, detect_faces
from engine.face.landmarks import LEFT_CHEEK, MIN_PRESENCE, NOSE_TIP, RIGHT_CHEEK, Face, face_landmarks
from engine.face.occlusion import mouth_visibility

MIN_INTEROCULAR = 40.0
MAX_YAW_DEGREES = 30.0
# Nose-tip depth in front of the cheek points at ear level (234, 454) over half the face
# width between them, measured on a frontal face mesh; converts the nose's sideways offset
# from the face midline into a yaw angle.
NOSE_DEPTH_RATIO = 1.41


class FaceError(ValueError):
    """A photo the rig cannot animate; ``reason`` is a short sentence for a person."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def estimate_yaw(landmarks: np.ndarray) -> float:
    """Head yaw in radians from landmark asymmetry (positive: the nose is towards image +x).

    The nose tip's offset from the midline of the two ear-level face-oval points, over half
    the distance between them, is ``NOSE_DEPTH_RATIO * tan(yaw)`` for a rigidly turned head
    seen from afar; only x and y are used.
    """
    right, left, nose = landmarks[RIGHT_CHEEK, :2], landmarks[LEFT_CHEEK, :2], landmarks[NOSE_TIP, :2]
    axis = left - right
    half = float(np.linalg.norm(axis)) / 2
    if half < 1e-6:
        return float(np.pi / 2)
    offset = float(np.dot(nose - (left + right) / 2, axis / (2 * half)))
    return float(np.arctan2(offset / half, NOSE_DEPTH_RATIO))


def check_face(face: Face) -> Face:
    """``face`` if it can be animated, else ``FaceError`` saying why (the turn is checked first)."""
    yaw = np.degrees(abs(estimate_yaw(face.landmarks)))
    if yaw > MAX_YAW_DEGREES:
        raise FaceError(
            f"face turned too far from the camera (about {yaw:.0f} degrees; a frontal face within "
            f"{MAX_YAW_DEGREES:.0f} degrees is needed)"
        )
    iod = face.interocular
    if iod < MIN_INTEROCULAR:
        raise FaceError(
            f"face too small to animate: the eyes are {iod:.0f} px apart, at least {MIN_INTEROCULAR:.0f} px needed"
        )
    return face


def check_mouth(image: np.ndarray, face: Face) -> Face:
    """``face`` if its mouth is in view in ``image``, else ``FaceError``."""
    if mouth_visibility(image, face).covered:
        raise FaceError("the mouth is covered: a photo with the lips in view is needed")
    return face


def find_face(image: np.ndarray) -> Face:
    """The face to animate in an (H, W, 3) RGB uint8 photo, landmarks in its pixels.

    With several faces the largest detection (box area) that the face mesh confirms is the one
    animated: the whole photo is searched first, then its tiles at each of ``ZOOMS`` until the
    mesh confirms a face (the detector also proposes things the mesh does not take for one, and
    a face small in a wide shot is found only in tiles). Raises
    ``FaceError`` with a short reason: "no face found", a face too small to animate (eyes
    closer than 40 px, the size is in the reason), a face turned too far (> 30 degrees), or a
    mouth covered by something (a hand, a microphone).
    """
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise FaceError(f"expected an RGB photo (H, W, 3) uint8, got {image.dtype} {tuple(image.shape)}")
    for zoom in ZOOMS:
        for box in sorted(detect_faces(image, zoom), key=lambda b: -b.width * b.height):
            face = face_landmarks(image, box)
            if face.presence >= MIN_PRESENCE:
                return check_mouth(image, check_face(face))
    raise FaceError("no face found")
