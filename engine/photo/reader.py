"""Motion reader: a small CNN that reads the face's motion (jaw, mouth shape, blink, head pose,
brows, gaze) from a frame the DiT generated, so a photograph can be warped, or a bundled avatar
redrawn, to do what the generated face does.

The engine keeps generating a stylised driver face from audio (its lip sync, idle motion and
continuity are what the model was trained for); the photo avatar copies that face's motion.
The reader is trained on puppet frames whose parameters are known exactly, across many
identities, poses, blinks and mouth shapes, with blur/noise/colour augmentation so it reads
the softer frames the generator makes. Like the openness probe it also sees the driver's
reference (neutral, mouth closed), which separates a wide mouth at rest from an open one.

Trained by ``avatar train`` (its ``reader`` stage) or ``python -m engine.train.reader`` (about
100 s of CPU).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch
from torch import nn

from engine.modules.base import load_trained
from engine.photo.crops import mouth_crops, region_crops, standardised
from engine.puppet import FaceState

# Trained by `avatar train` (stage "reader") beside the bundled model; it reads any engine's frames.
READER_PATH = Path(__file__).resolve().parent.parent / "weights" / "tiny" / "motion_reader.safetensors"
FACE_INPUT = 48
# The eyes under every pose the puppet's tracks produce, as fractions of the square frame
# (top, bottom, left, right), read at EYE_INPUT (half the frame's own 256 px: at a quarter, held-out
# blinks read r 0.81 instead of 0.90): a blink is a few pixels of lid.
EYE_REGION = (0.34, 0.54, 0.28, 0.72)
EYE_INPUT = (48, 96)
# What the reader outputs, in order: FaceState fields, scaled so each spans about [-1, 1].
OUTPUTS: tuple[tuple[str, float], ...] = (
    ("openness", 1.0), ("blink", 1.0), ("wide", 1.0), ("rounded", 1.0),
    ("yaw", 0.3), ("pitch", 0.25), ("roll", 0.15), ("tx", 0.04), ("ty", 0.03),
    ("brow", 1.0), ("gaze_x", 0.6), ("gaze_y", 0.4),
)
SCALES = torch.tensor([scale for _, scale in OUTPUTS])


def face_crops(frames: np.ndarray) -> torch.Tensor:
    """(T, H, W, 3) uint8 -> (T, 3, FACE_INPUT, FACE_INPUT) float in [0, 1]: the whole square frame."""
    return region_crops(frames, (0.0, 1.0, 0.0, 1.0), (FACE_INPUT, FACE_INPUT))


def eye_crops(frames: np.ndarray) -> torch.Tensor:
    """(T, H, W, 3) uint8 -> (T, 3, *EYE_INPUT) float in [0, 1]: both eyes."""
    return region_crops(frames, EYE_REGION, EYE_INPUT)


CROPS = (mouth_crops, face_crops, eye_crops)  # the reader's towers, in order


def _tower(channels: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(3), nn.Flatten(),
    )


class MotionReader(nn.Module):
    """Three towers (the mouth, the whole face and the eyes, each beside the reference's) and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.mouth = _tower(6)
        self.face = _tower(6)
        self.eyes = _tower(6)
        self.head = nn.Sequential(nn.Linear(3 * 32 * 9, 64), nn.ReLU(), nn.Linear(64, len(OUTPUTS)))

    def forward(self, mouth: torch.Tensor, face: torch.Tensor, eyes: torch.Tensor) -> torch.Tensor:
        """Scaled outputs (see ``OUTPUTS``) for (N, 6, ., .) frame+reference crop pairs."""
        towers = (self.mouth(standardised(mouth)), self.face(standardised(face)), self.eyes(standardised(eyes)))
        return self.head(torch.cat(towers, dim=1))


ReferenceCrops = tuple[torch.Tensor, ...]  # each tower's (R, 3, ., .) crops of R references


def reference_crops(refs: np.ndarray) -> ReferenceCrops:
    """Each tower's crops of a neutral (H, W, 3) image or of (R, H, W, 3) ones. A session's
    reference never changes: cropped once, it serves every frame (cropping is most of a read)."""
    refs = np.asarray(refs)
    return tuple(crop(refs[None] if refs.ndim == 3 else refs) for crop in CROPS)


def paired_crops(frames: np.ndarray, refs: np.ndarray | ReferenceCrops,
                 repeats: int | torch.Tensor | None = None) -> list[torch.Tensor]:
    """Each tower's (N, 6, ., .) input: a frame's crop beside its reference's. ``refs`` (images,
    or their ``reference_crops``) is one per ``repeats`` frames (a count, or one count per
    reference), one per frame (None), or a single one for all."""
    ref_crops = reference_crops(refs) if isinstance(refs, np.ndarray) else refs
    out = []
    for crop, r in zip(CROPS, ref_crops, strict=True):
        x = crop(frames)
        if repeats is not None:
            r = r.repeat_interleave(repeats, dim=0)
        elif len(r) == 1:
            r = r.expand(x.shape[0], -1, -1, -1)
        out.append(torch.cat([x, r], dim=1))
    return out


@functools.lru_cache(maxsize=4)
def load_reader(path: Path = READER_PATH) -> MotionReader:
    """The shipped reader (loaded once per process; read-only)."""
    return load_trained(MotionReader(), path, "motion reader", "engine.train.reader")


def read_motion(frames: np.ndarray, reference: np.ndarray | ReferenceCrops, reader: MotionReader | None = None,
                repeats: torch.Tensor | None = None) -> list[FaceState]:
    """The face state of each (T, H, W, 3) uint8 frame of a driver face; ``reference`` is its
    neutral image (H, W, 3), or one per frame (T, H, W, 3) when the frames are of several
    drivers, or their ``reference_crops`` (one per ``repeats`` frames where given)."""
    net = reader or load_reader()
    with torch.inference_mode():
        values = net(*paired_crops(frames, reference, repeats)) * SCALES
    return [FaceState(**{name: float(v) for (name, _), v in zip(OUTPUTS, row, strict=True)})
            for row in values.tolist()]
