"""Redraw: a session's frames drawn at the motion of the face the DiT generated.

The DiT generates a stylised driver face from the audio (lip sync, blinks, idle and speaking
head motion, continuity across chunks: what the model was trained for). This stage reads
that face's motion and hands it to the session's ``Drawer``. Where the engine has a latent reader
(``LatentMotionReader``) the motion is read from the DiT's latents and the driver face is never
decoded; otherwise it is read from each decoded driver frame (``MotionReader``). Either way one
forward reads every frame of every redrawn session in the batch. The drawers:

- a photograph's ``PhotoRig`` warps the photo to it (what does not move stays the photo's
  own pixels);
- a bundled avatar's ``PuppetRig`` draws that avatar with its own renderer at it (sharp at
  any size, the identity exact by construction).

Where a session hears its own audio (``RedrawState.heard``, a streaming ``MouthTracker``, eased) its mouth
comes from what a speech encoder trained on real voices hears (``engine.speech``), not from the
DiT's face: the DiT learnt its mouth from synthetic voices and follows a real voice little better
than its loudness, while the encoder hears the words whoever speaks. The head, eyes and brows stay
the DiT's. A frame's mouth comes from the audio through 160 ms past its end (the rest of the
reader's block and its lookahead), so a redrawn session's frames wait that long for their mouths.

A session also carries how much its face is talking: an envelope of the read mouth's
openness that rises within a few frames of speech and falls over about a second of silence
(a photo's posed smile eases while it is up). The only state carried between chunks is the
last frame's read motion and that envelope, so memory stays flat.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from engine.frames import PublishedFrame
from engine.photo.latent_reader import CONTEXT, LatentMotionReader, continuous, stack_inputs, to_states
from engine.photo.reader import MotionReader, ReferenceCrops, read_motion, reference_crops
from engine.puppet import FaceState
from engine.puppet.mouth import MouthTrack, MouthTracker

# Share of the previous frame's head pose kept per frame: reading pose from one soft frame is
# noisier than the pose itself moves in 40 ms. The mouth and the eyelids are never smoothed.
POSE_SMOOTHING = 0.5
POSE = ("yaw", "pitch", "roll", "tx", "ty")
# The talking envelope: openness above SPEAKING counts as speech; per frame it closes this share of
# its distance to 1 while speech lasts (~4 frames) and to 0 in silence (~1.3 s at 25 fps).
SPEAKING = 0.15
TALK_ATTACK, TALK_RELEASE = 0.25, 0.03
# The heard mouth's speech reader: blocks of 2 frames read with 3 frames of audio past them, so a
# redrawn frame waits 160 ms past its end for its mouth (blocks of 4 with 2: 200 ms, for half the
# encoder passes; the puppet keeps those, its sessions cost a third less).
HEARD_BLOCK_FRAMES, HEARD_READ_AHEAD_FRAMES = 2, 3
HEARD_LOOKAHEAD_FRAMES = HEARD_BLOCK_FRAMES + HEARD_READ_AHEAD_FRAMES - 1
HEARD_EASE = 0.7  # share of the way to the heard mouth the drawn one moves per frame ...
# ... and for a closing mouth's openness: lips meet in a frame or two on a p, b or m, and a closure
# eased as slowly as an opening stops short of closed
HEARD_CLOSE_EASE = 1.0


Heard = tuple[np.ndarray, bool]  # a hearing session's next audio, and whether its stream ends there


class Drawer(Protocol):
    """What draws a session's frames from read motion: a square of ``size`` pixels a side."""

    size: int

    def draw(self, state: FaceState, talking: float = 0.0) -> np.ndarray:
        """The (size, size, 3) uint8 frame for one read face state; ``talking`` in [0, 1] is the
        session's talking envelope."""
        ...


@dataclass(frozen=True)
class RedrawState:
    """One redrawn session between chunks: its drawer, the driver's neutral frame, the last motion."""

    drawer: Drawer
    driver_reference: np.ndarray  # (H, W, 3) uint8: the driver avatar's reference image
    last: FaceState | None = None
    driver_crops: ReferenceCrops = ()  # the reference as the reader takes it; cropped when empty
    talking: float = 0.0  # the talking envelope after the last frame
    # Read from latents: the driver reference's low-res latent (c, h, w), and the last CONTEXT
    # latents read (zeros before the first), which the next latents are read beside.
    latent_reference: torch.Tensor | None = None
    latents_before: torch.Tensor | None = None
    read_last: torch.Tensor | None = None  # the last shown frame's outputs as read (scaled), for continuity
    heard: HeardMouth | None = None  # hears the session's audio: the mouth from its phones (None: the DiT's)

    def __post_init__(self) -> None:
        if not self.driver_crops:
            object.__setattr__(self, "driver_crops", reference_crops(self.driver_reference))


def smooth_pose(state: FaceState, last: FaceState | None, smoothing: float = POSE_SMOOTHING) -> FaceState:
    """``state`` with its head pose smoothed against the previous frame's ``last``."""
    if last is None:
        return state
    return dataclasses.replace(state, **{k: smoothing * getattr(last, k) + (1.0 - smoothing) * getattr(state, k)
                                         for k in POSE})


@dataclass
class HeardMouth:
    """A redrawn session's ear: a streaming ``MouthTracker`` over its audio, and a light one-pole
    ease on what it hears. A frame's mouth waits for ``lookahead`` samples of audio past its end
    (the speech reader's block and lookahead), so the session's frames wait for them too. Eased by
    ``HEARD_EASE`` a frame (``HEARD_CLOSE_EASE`` as it closes) the mouth moves no less smoothly
    than real mouths do (second over first temporal difference of the opening at most 1.45, real
    speakers 1.1-1.6) at no cost to how well it follows them."""

    tracker: MouthTracker
    eased: np.ndarray | None = None  # the last frame's (openness, closed, open, rounded, wide)
    waiting: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))  # heard, their frames not drawn yet

    @classmethod
    def of(cls, sample_rate: int, fps: int) -> HeardMouth:
        return cls(MouthTracker(sample_rate, fps, block_frames=HEARD_BLOCK_FRAMES,
                                read_ahead_frames=HEARD_READ_AHEAD_FRAMES))

    @property
    def heard(self) -> int:
        """Samples of the session's audio heard so far (the next ``hear`` continues from here)."""
        return self.tracker.received

    @property
    def lookahead(self) -> int:
        """Samples past a frame's end its mouth waits for."""
        return self.tracker.lookahead

    def rewind(self, sample: int) -> None:
        """The audio from ``sample`` on changed: hear it again (frames already made stay)."""
        self.tracker.rewind(sample)

    def hear(self, audio: np.ndarray, final: bool = False) -> np.ndarray:
        """The audio from ``heard`` on -> the eased mouths of the frames it settles, (frames, 5);
        ``final``: the audio ends there, so every frame it covers is made (and nothing after)."""
        if self.tracker.closed:
            return np.zeros((0, 5))
        track = self.tracker.push(np.asarray(audio, np.float32))
        if final:
            track = MouthTrack.concat([track, self.tracker.close()], track.fps)
        heard = np.concatenate([track.openness[:, None], track.weights], axis=1).astype(np.float64)
        out = ease_mouths(heard, self.eased)
        if len(heard):
            self.eased = out[-1]
        return out


def ease_mouths(heard: np.ndarray, last: np.ndarray | None) -> np.ndarray:
    """Heard mouths (frames, 5: openness and the shape weights) eased frame by frame from ``last``
    (the frame before; None: from the first): ``HEARD_EASE`` of the way a frame, and
    ``HEARD_CLOSE_EASE`` for an openness that falls."""
    out = np.empty_like(heard)
    opening = np.full(heard.shape[1], HEARD_EASE)
    closing = opening.copy()
    closing[0] = HEARD_CLOSE_EASE
    y = heard[0] if last is None and len(heard) else last
    for k, target in enumerate(heard):
        y = y + (closing if target[0] < y[0] else opening) * (target - y)
        out[k] = y
    return out


def heard_mouths(motions: Sequence[FaceState], heard: HeardMouth, audio: np.ndarray,
                 final: bool = False) -> list[FaceState]:
    """``motions`` with their mouths replaced by those ``heard`` in ``audio`` (continuing what it
    heard before, through these frames' lookahead; ``final``: the stream's last audio, whose
    mouths past these frames wait for theirs)."""
    mouths = np.concatenate([heard.waiting, heard.hear(audio, final)])
    heard.waiting = mouths[len(motions):]
    out = []
    for k, motion in enumerate(motions):
        if k >= len(mouths):  # not heard yet (audio short of the frames): the DiT's mouth
            out.append(motion)
            continue
        openness, closed, open_, rounded, wide = mouths[k].tolist()
        out.append(dataclasses.replace(motion, openness=openness, closed=closed, open=open_, rounded=rounded,
                                       wide=wide))
    return out


def talking_envelope(talking: float, state: FaceState) -> float:
    """The envelope after one more frame whose read mouth is ``state``."""
    speaking = state.openness > SPEAKING
    return talking + ((1.0 - talking) * TALK_ATTACK if speaking else -talking * TALK_RELEASE)


class Redraw:
    """Driver motion of several sessions -> their drawers' frames (and each session's new state)."""

    def __init__(self, reader: MotionReader | None = None, latent_reader: LatentMotionReader | None = None) -> None:
        self.reader = reader
        self.latent_reader = latent_reader

    def __call__(self, frames: Sequence[list[PublishedFrame]], states: Sequence[RedrawState],
                 heard: Sequence[Heard | None] | None = None) -> tuple[list[list[PublishedFrame]], list[RedrawState]]:
        """Decoded driver frames -> the same frames drawn at the motion read off them (``heard``: as
        for :meth:`draw`)."""
        counts = [len(f) for f in frames]
        if not sum(counts):
            return [list(f) for f in frames], list(states)
        driver = np.stack([p.rgb for f in frames for p in f])
        refs = tuple(torch.cat(tower) for tower in zip(*(st.driver_crops for st in states), strict=True))
        read = iter(read_motion(driver, refs, self.reader, repeats=torch.tensor(counts)))
        images, new_states = self.draw([[next(read) for _ in f] for f in frames], states, heard)
        return ([[dataclasses.replace(p, rgb=rgb) for p, rgb in zip(f, made, strict=True)]
                 for f, made in zip(frames, images, strict=True)], new_states)

    def read_latents(self, latents: Sequence[torch.Tensor], frames: Sequence[Sequence[int]],
                     states: Sequence[RedrawState]) -> tuple[list[list[FaceState]], list[RedrawState]]:
        """Each session's consecutive low-res latents (F, c, h, w) -> the motion of the frames
        ``frames`` picks from their slots (latent k's frames are slots k * frames-per-latent on),
        and the states holding the latents read."""
        if self.latent_reader is None:
            raise RuntimeError("no latent reader: redraw from decoded frames")
        rows, befores = [], []
        for lat, st in zip(latents, states, strict=True):
            if st.latent_reference is None:
                raise ValueError("a session read from latents needs its reference's latent")
            before = st.latents_before if st.latents_before is not None else lat.new_zeros(CONTEXT, *lat.shape[1:])
            rows.append(stack_inputs(lat, before, st.latent_reference))
            befores.append(before)
        with torch.inference_mode():
            values = self.latent_reader(torch.cat(rows))
        out, kept, at = [], [], 0
        for lat, numbers, st, before in zip(latents, frames, states, befores, strict=True):
            read, last = continuous(values[at:at + lat.shape[0]], numbers, st.read_last)
            at += lat.shape[0]
            out.append(to_states(read.reshape(-1, values.shape[-1])[list(numbers)]))
            kept.append(dataclasses.replace(st, latents_before=torch.cat([before, lat])[-CONTEXT:].clone(),
                                            read_last=last))
        return out, kept

    def draw(self, motions: Sequence[Sequence[FaceState]], states: Sequence[RedrawState],
             heard: Sequence[Heard | None] | None = None) -> tuple[list[list[np.ndarray]], list[RedrawState]]:
        """Each session's frames drawn at its read motions (pose smoothed, talking envelope kept);
        ``heard``: for each session that hears, its audio from what it heard before through its
        frames' lookahead, and whether the stream ends there: its mouths come from that."""
        images: list[list[np.ndarray]] = []
        new_states: list[RedrawState] = []
        for i, (session_motions, state) in enumerate(zip(motions, states, strict=True)):
            if state.heard is not None and heard is not None and heard[i] is not None:
                session_motions = heard_mouths(session_motions, state.heard, *heard[i])
            last, talking, made = state.last, state.talking, []
            for motion in session_motions:
                last = smooth_pose(motion, last)
                talking = talking_envelope(talking, last)
                made.append(state.drawer.draw(last, talking))
            images.append(made)
            new_states.append(dataclasses.replace(state, last=last, talking=talking))
        return images, new_states
