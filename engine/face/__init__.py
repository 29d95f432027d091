"""A real person's face in a photograph: find it, crop it, animate it by warping the photo's pixels.

``find_face(image)`` -> ``Face`` (468 mesh landmarks in image pixels) or ``FaceError`` with a
short reason; ``crop_face(image, face)`` -> a square head-and-shoulders crop and the face in
it; ``PhotoRig.from_photo(crop, face).render(FaceMotion(...))`` -> one animated frame.
The models are mediapipe's tflite files, installed once by ``python -m engine.face.models``.
"""

from engine.face.checks import FaceError, estimate_yaw, find_face
from engine.face.crop import crop_face
from engine.face.detect import FaceBox, detect_faces
from engine.face.landmarks import Face, face_landmarks
from engine.face.models import FaceModelsMissing, ensure_face_models, face_model_dir, install_face_models
from engine.face.rig import FaceMotion, PhotoRig

__all__ = [
    "Face",
    "FaceBox",
    "FaceError",
    "FaceModelsMissing",
    "FaceMotion",
    "PhotoRig",
    "crop_face",
    "detect_faces",
    "ensure_face_models",
    "estimate_yaw",
    "face_landmarks",
    "face_model_dir",
    "find_face",
    "install_face_models",
]
