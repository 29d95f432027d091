"""The 468-point face mesh (mediapipe's ``face_landmark.tflite``) around a detected face.

As mediapipe's ``face_landmark_front`` graph does, the region of interest is the detection
box made square on its long side and scaled 1.5x, rotated so the eyes are level (the
angle of the right-eye -> left-eye keypoint vector); it is resampled to 192x192 in [0, 1]
(edge pixels replicated), and the model's landmarks are projected back to image pixels.
``z`` is depth in the same pixel scale as ``x`` (smaller = nearer the camera, about zero at
the centre of the head).

The named index groups are mediapipe's well-known mesh indices (face_mesh_connections);
"right"/"left" are the subject's (the right eye is on the image's left).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import cv2
import numpy as np

from engine.face.detect import FaceBox
from engine.face.models import LANDMARK_FILE, ensure_face_models

MESH_SIZE = 192
NUM_LANDMARKS = 468
ROI_SCALE = 1.5
MIN_PRESENCE = 0.5

# Lip contours, each from the right mouth corner (image left) to the left one.
LIPS_OUTER_UPPER = (61, 185, 40, 39, 37, 0, 267, 269, 270, 409, 291)
LIPS_OUTER_LOWER = (61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291)
LIPS_INNER_UPPER = (78, 191, 80, 81, 82, 13, 312, 311, 310, 415, 308)
LIPS_INNER_LOWER = (78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308)
# Eyes: upper and lower lids from the outer corner... inner corner (pairs line up by position).
RIGHT_EYE_UPPER = (33, 246, 161, 160, 159, 158, 157, 173, 133)
RIGHT_EYE_LOWER = (33, 7, 163, 144, 145, 153, 154, 155, 133)
LEFT_EYE_UPPER = (263, 466, 388, 387, 386, 385, 384, 398, 362)
LEFT_EYE_LOWER = (263, 249, 390, 373, 374, 380, 381, 382, 362)
# The ring just above each upper lid (lid skin towards the crease), same order as the lid.
RIGHT_LID_CREASE = (130, 247, 30, 29, 27, 28, 56, 190, 243)
LEFT_LID_CREASE = (359, 467, 260, 259, 257, 258, 286, 414, 463)
RIGHT_BROW = (70, 63, 105, 66, 107, 55, 65, 52, 53, 46)
LEFT_BROW = (300, 293, 334, 296, 336, 285, 295, 282, 283, 276)
# Face oval clockwise from the top of the forehead (10); 152 is the chin.
FACE_OVAL = (
    10, 338, 297, 332, 284, 251, 389, 356, 454, 323, 361, 288, 397, 365, 379, 378, 400, 377,
    152, 148, 176, 149, 150, 136, 172, 58, 132, 93, 234, 127, 162, 21, 54, 103, 67, 109,
)
# The lower half of the oval: jaw line from the right jaw angle (132) round the chin to the left (361).
JAW = (132, 58, 172, 136, 150, 149, 176, 148, 152, 377, 400, 378, 379, 365, 397, 288, 361)
NOSE_TIP = 1
CHIN = 152
FOREHEAD = 10
CHEEKBONES = (50, 280)  # on the cheeks below the eyes: bare skin in most photos
RIGHT_CHEEK = 234  # the oval's point at ear level on the subject's right (image left)
LEFT_CHEEK = 454
RIGHT_EYE_CORNERS = (33, 133)
LEFT_EYE_CORNERS = (263, 362)
MOUTH_CORNERS = (61, 291)
UPPER_LIP_CENTER = 13  # inner contour
LOWER_LIP_CENTER = 14


@dataclass(frozen=True)
class Face:
    """One face: (468, 3) float32 landmarks (x, y, z) in image pixels, the detection, mesh presence."""

    landmarks: np.ndarray
    box: FaceBox | None = None
    presence: float = 1.0

    lips_outer_upper = LIPS_OUTER_UPPER
    lips_outer_lower = LIPS_OUTER_LOWER
    lips_inner_upper = LIPS_INNER_UPPER
    lips_inner_lower = LIPS_INNER_LOWER
    right_eye_upper = RIGHT_EYE_UPPER
    right_eye_lower = RIGHT_EYE_LOWER
    left_eye_upper = LEFT_EYE_UPPER
    left_eye_lower = LEFT_EYE_LOWER
    face_oval = FACE_OVAL
    jaw = JAW

    @property
    def xy(self) -> np.ndarray:
        return self.landmarks[:, :2]

    def points(self, indices) -> np.ndarray:
        """(n, 2) image positions of some landmarks."""
        return self.landmarks[list(indices), :2]

    @property
    def right_eye_center(self) -> np.ndarray:
        return self.points(RIGHT_EYE_UPPER + RIGHT_EYE_LOWER).mean(0)

    @property
    def left_eye_center(self) -> np.ndarray:
        return self.points(LEFT_EYE_UPPER + LEFT_EYE_LOWER).mean(0)

    @property
    def interocular(self) -> float:
        """Distance between the eye centres in pixels, in 3-D (so a turned head keeps its size)."""
        eyes = (RIGHT_EYE_UPPER + RIGHT_EYE_LOWER, LEFT_EYE_UPPER + LEFT_EYE_LOWER)
        right, left = (self.landmarks[list(e)].mean(0) for e in eyes)
        return float(np.linalg.norm(left - right))

    @property
    def mouth_center(self) -> np.ndarray:
        return self.points(LIPS_INNER_UPPER + LIPS_INNER_LOWER).mean(0)

    @property
    def mouth_width(self) -> float:
        a, b = self.points(MOUTH_CORNERS)
        return float(np.linalg.norm(b - a))

    def lip_gap(self) -> float:
        """Mean vertical distance between the inner lips over their middle points, in pixels."""
        return lip_gap(self.landmarks)

    def eye_gap(self) -> float:
        """Mean lid distance of both eyes over their middle points, in pixels."""
        return eye_gap(self.landmarks)

    def translated(self, dx: float, dy: float, scale: float = 1.0) -> Face:
        """The same face in an image scaled by ``scale`` and then shifted by (dx, dy)."""
        lm = self.landmarks * np.float32(scale)
        lm[:, 0] += dx
        lm[:, 1] += dy
        return Face(lm.astype(np.float32), None, self.presence)


def lip_gap(landmarks: np.ndarray) -> float:
    """Mean distance between the inner upper and inner lower lip (middle 5 point pairs), pixels."""
    up = landmarks[list(LIPS_INNER_UPPER[3:8]), :2]
    lo = landmarks[list(LIPS_INNER_LOWER[3:8]), :2]
    return float(np.linalg.norm(lo - up, axis=1).mean())


def eye_gap(landmarks: np.ndarray) -> float:
    """Mean distance between upper and lower lid (middle 5 point pairs of each eye), pixels."""
    gaps = []
    for up, lo in ((RIGHT_EYE_UPPER, RIGHT_EYE_LOWER), (LEFT_EYE_UPPER, LEFT_EYE_LOWER)):
        gaps.append(np.linalg.norm(landmarks[list(lo[2:7]), :2] - landmarks[list(up[2:7]), :2], axis=1).mean())
    return float(np.mean(gaps))


def roi_from_box(face: FaceBox, scale: float = ROI_SCALE) -> tuple[np.ndarray, float, float]:
    """The mesh's square ROI for a detection: (centre (2,), side in pixels, rotation in radians)."""
    (x0, y0, x1, y1) = face.box
    center = np.array([(x0 + x1) / 2, (y0 + y1) / 2], dtype=np.float64)
    right_eye, left_eye = face.keypoints[0].astype(np.float64), face.keypoints[1].astype(np.float64)
    angle = float(np.arctan2(left_eye[1] - right_eye[1], left_eye[0] - right_eye[0]))
    side = max(x1 - x0, y1 - y0) * scale
    return center, float(side), angle


def roi_matrix(center: np.ndarray, side: float, angle: float, size: int = MESH_SIZE) -> np.ndarray:
    """2x3 affine taking ROI pixels (0..size) to image pixels."""
    s = side / size
    c, si = np.cos(angle), np.sin(angle)
    rot = np.array([[c, -si], [si, c]]) * s
    offset = np.asarray(center, np.float64) - rot @ np.array([size / 2, size / 2])
    return np.concatenate([rot, offset[:, None]], axis=1)


class FaceMesher:
    """The face-mesh model; ``landmarks(image, box)`` -> (468, 3) image pixels + presence. Thread-safe."""

    def __init__(self, model_dir: Path | None = None):
        from ai_edge_litert.interpreter import Interpreter

        path = ensure_face_models(model_dir) / LANDMARK_FILE
        self._interp = Interpreter(model_path=str(path), num_threads=1)
        self._interp.allocate_tensors()
        self._input = self._interp.get_input_details()[0]["index"]
        outs = sorted(self._interp.get_output_details(), key=lambda d: -int(np.prod(d["shape"])))
        self._mesh, self._presence = outs[0]["index"], outs[1]["index"]
        self._lock = threading.Lock()

    def run_roi(self, image: np.ndarray, center: np.ndarray, side: float, angle: float) -> tuple[np.ndarray, float]:
        """Landmarks (468, 3) in image pixels and the presence probability for one ROI."""
        m = roi_matrix(center, side, angle)
        # ROI pixel index i samples the image at m @ i (this matches mediapipe's output to ~0.02 px).
        crop = cv2.warpAffine(
            image, m, (MESH_SIZE, MESH_SIZE), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
            borderMode=cv2.BORDER_REPLICATE,
        )
        x = (crop.astype(np.float32) / 255.0)[None]
        with self._lock:
            self._interp.set_tensor(self._input, x)
            self._interp.invoke()
            raw = self._interp.get_tensor(self._mesh).reshape(NUM_LANDMARKS, 3).astype(np.float64)
            logit = float(self._interp.get_tensor(self._presence).ravel()[0])
        xy = raw[:, :2] @ m[:, :2].T + m[:, 2]
        z = raw[:, 2] * (side / MESH_SIZE)
        lm = np.concatenate([xy, z[:, None]], axis=1).astype(np.float32)
        return lm, float(1.0 / (1.0 + np.exp(-np.clip(logit, -80, 80))))

    def landmarks(self, image: np.ndarray, box: FaceBox) -> Face:
        """The mesh for one detection, as a ``Face``."""
        center, side, angle = roi_from_box(box)
        lm, presence = self.run_roi(image, center, side, angle)
        return Face(lm, box, presence)


@lru_cache(maxsize=1)
def default_mesher() -> FaceMesher:
    """One shared mesh model on the default model folder."""
    return FaceMesher()


def face_landmarks(image: np.ndarray, box: FaceBox) -> Face:
    """``FaceMesher.landmarks`` on the shared model."""
    return default_mesher().landmarks(image, box)
