"""Procedural talking-head puppet: training data, lip-sync ground truth and bundled avatars.

Everything is drawn from code (no assets): an ``Identity`` says who, a ``FaceState``
says what the face does in one frame, ``render`` draws it, and ``face_track_from_audio``
turns speech into a track of face states whose mouth openness is known exactly
(``FaceTracker`` does the same as the audio streams in).
"""

from engine.puppet.draw import reference_image, render, render_video
from engine.puppet.identity import IDENTITIES, Identity, get_identity, identity_names
from engine.puppet.mouth import MouthTrack, mouth_track, openness_series
from engine.puppet.state import FACE_STATE_FIELDS, MOUTH_SHAPES, NEUTRAL, FaceState, stack_states
from engine.puppet.stream import FaceTracker, face_track_from_audio

__all__ = [
    "FACE_STATE_FIELDS",
    "IDENTITIES",
    "MOUTH_SHAPES",
    "NEUTRAL",
    "FaceState",
    "FaceTracker",
    "Identity",
    "MouthTrack",
    "face_track_from_audio",
    "get_identity",
    "identity_names",
    "mouth_track",
    "openness_series",
    "reference_image",
    "render",
    "render_video",
    "stack_states",
]
