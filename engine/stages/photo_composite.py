"""PhotoComposite: the frames of a photo session, made of the photo itself.

A photo session's DiT generates a stylised driver face from the audio (lip sync, blinks,
idle and speaking head motion, continuity across chunks: what the model was trained for).
This stage reads that face's motion from each published driver frame (``MotionReader``,
one forward for every frame of every photo session in the batch) and warps the photo to it
(``PhotoRig``): what does not move stays the photograph's own pixels. The only state it
carries between chunks is the last frame's head pose, so memory stays flat.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.face.rig import FaceMotion, PhotoRig
from engine.frames import PublishedFrame
from engine.photo.reader import MotionReader, read_motion
from engine.puppet import FaceState

# Share of the previous frame's head pose kept per frame: reading pose from one soft frame is
# noisier than the pose itself moves in 40 ms. The mouth and the eyelids are never smoothed.
POSE_SMOOTHING = 0.5
# Openness read below this is a closed mouth: the reader reads ~0.0-0.12 on closed driver mouths,
# and a photo's lips must meet in silence.
CLOSED_BELOW = 0.1


@dataclass(frozen=True)
class PhotoState:
    """One photo session between chunks: its rig, the driver's neutral frame, the last motion."""

    rig: PhotoRig
    driver_reference: np.ndarray  # (H, W, 3) uint8: the driver avatar's reference image
    last: FaceMotion | None = None


def to_motion(state: FaceState, last: FaceMotion | None, smoothing: float = POSE_SMOOTHING) -> FaceMotion:
    """The photo's motion for one read driver state, its head pose smoothed against ``last``."""
    pose = {"yaw": state.yaw, "pitch": state.pitch, "roll": state.roll, "tx": state.tx, "ty": state.ty}
    if last is not None:
        pose = {k: smoothing * getattr(last, k) + (1.0 - smoothing) * v for k, v in pose.items()}
    return FaceMotion(jaw_open=min(max((state.openness - CLOSED_BELOW) / (1.0 - CLOSED_BELOW), 0.0), 1.0),
                      mouth_width=min(max(state.wide - state.rounded, -1.0), 1.0),
                      blink=min(max(state.blink, 0.0), 1.0), **pose)


class PhotoComposite:
    """Driver frames of several sessions -> photo frames (and each session's new state)."""

    def __init__(self, reader: MotionReader | None = None) -> None:
        self.reader = reader

    def __call__(self, frames: Sequence[list[PublishedFrame]],
                 states: Sequence[PhotoState]) -> tuple[list[list[PublishedFrame]], list[PhotoState]]:
        counts = [len(f) for f in frames]
        if not sum(counts):
            return [list(f) for f in frames], list(states)
        driver = np.stack([p.rgb for f in frames for p in f])
        refs = np.stack([st.driver_reference for st, n in zip(states, counts, strict=True) for _ in range(n)])
        read = iter(read_motion(driver, refs, self.reader))
        out: list[list[PublishedFrame]] = []
        new_states: list[PhotoState] = []
        for session_frames, state in zip(frames, states, strict=True):
            last, made = state.last, []
            for frame in session_frames:
                last = to_motion(next(read), last)
                made.append(dataclasses.replace(frame, rgb=state.rig.render(last)))
            out.append(made)
            new_states.append(dataclasses.replace(state, last=last))
        return out, new_states
