"""A bundled avatar drawn by its own renderer at the motion read off a generated face.

``PuppetRig`` is the stylised avatars' drawer for ``engine.stages.redraw``: the DiT generates
the avatar's motion from audio, the motion reader reads it back from each generated frame,
and the renderer draws the avatar at it. The frames are as sharp as the renderer's own (the
autoencoder's blur never reaches them) and the identity is exact by construction; the mouth,
blinks, head pose, brows and gaze are the generated face's as the reader sees them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from engine.puppet.draw import render
from engine.puppet.identity import Identity
from engine.puppet.state import SHAPE_ONSET, FaceState


def drawable(state: FaceState) -> FaceState:
    """A read face state made one the renderer draws as the track it came from would: values
    clamped to their ranges, the shape weights rebuilt from openness and the read wide/rounded
    (closed = the share not yet parted, open = the parted share that is neither)."""
    openness = max(state.openness, 0.0)
    parted = min(openness / SHAPE_ONSET, 1.0)
    wide = min(max(state.wide, 0.0), parted)
    rounded = min(max(state.rounded, 0.0), parted - wide)
    return dataclasses.replace(state, openness=openness, blink=_clamp(state.blink, 0.0), closed=1.0 - parted,
                               open=parted - wide - rounded, wide=wide, rounded=rounded, brow=_clamp(state.brow),
                               gaze_x=_clamp(state.gaze_x), gaze_y=_clamp(state.gaze_y))


def _clamp(value: float, low: float = -1.0) -> float:
    return min(max(value, low), 1.0)


@dataclass(frozen=True)
class PuppetRig:
    """One bundled identity drawn at ``size`` pixels a side."""

    identity: Identity
    size: int

    def draw(self, state: FaceState, talking: float = 0.0) -> np.ndarray:
        """The (size, size, 3) uint8 frame for a read face state (its renderer draws the
        avatar's own expression whatever ``talking`` says)."""
        return render(self.identity, drawable(state), self.size)
