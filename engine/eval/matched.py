"""The renderer's take that fits a generated video: a fair ground truth for sharpness.

Blinks, gaze, brows and head sway are not in the audio: two takes of the renderer that differ
only in them score 23 dB against each other, so PSNR against one fixed take mostly measures how
far a video's idle motion is from that take's, and a soft frame that blurs it away scores
better than a sharp one. The matched take takes what the audio decides (the mouth: openness
and shape) from the ground truth and what it does not from the video itself, read off its
frames by the motion reader, and draws that with the renderer. Scored against it, a video loses
for a mouth that does not follow the speech and for pixels that are not the avatar's (blur,
smears), but not for blinking at other moments than one take did.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from engine.photo.reader import read_motion
from engine.puppet import FaceState, Identity, render_video
from engine.puppet.rig import drawable

# What the audio decides: the ground truth's, in the matched take.
MOUTH = ("openness", "closed", "open", "rounded", "wide")


def matched_states(read: list[FaceState], truth: list[FaceState]) -> list[FaceState]:
    """Each read state, made drawable, with its frame's ground-truth mouth."""
    return [dataclasses.replace(drawable(r), **{k: getattr(t, k) for k in MOUTH})
            for r, t in zip(read, truth, strict=False)]


def matched_take(frames: np.ndarray, truth: list[FaceState], identity: Identity,
                 reference: np.ndarray) -> np.ndarray:
    """(T, S, S, 3) renderer frames of ``identity`` at the ground truth's mouth and the motion
    read off the first T (square, S-pixel) ``frames``; ``reference`` is the avatar's neutral image."""
    n = min(len(frames), len(truth))
    states = matched_states(read_motion(frames[:n], reference), truth[:n])
    return render_video(identity, states, frames.shape[1])
