"""Batched execution across sessions: what lets chunks of several sessions share one forward.

A worker serving many sessions asks each for ``batch_key()`` and runs the sessions whose
keys are equal with one ``step_batch`` call: one DiT, SR and decoder forward over all of
them. Two chunks can share a forward when everything that shapes the computation is the
same: the model set and config, the chunk kind and step count, guidance, and the chunk's
layout relative to its own start (RoPE sees window slots, not global indices, so where a
session is on its timeline does not matter).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from engine.frames import PublishedFrame


class Render(StrEnum):
    """How a session's frames are made, which decides what its chunks cost after the DiT."""

    DECODED = "decoded"  # the decoder's frames of the DiT's latents
    DRAWN = "drawn"  # a bundled avatar's renderer, at the motion read off the latents
    PHOTO = "photo"  # a photo avatar's rig, at the motion read off the latents


# The kind of work that draws a hearing redrawn session's next frames apart from the chunk that
# made their motion (``engine.stages.motion_backlog``); its ``span`` is the frames drawn.
DRAW = "draw"


@dataclass(frozen=True)
class BatchKey:
    """What must be equal for two sessions' next chunks to run as one batch."""

    kind: str  # "N", "I", "tail" (the end-of-stream publish) or DRAW
    steps: int  # denoising steps of the chunk
    guided: bool  # audio guidance asked for (a row of pure silence still skips its pair)
    engine: Hashable = None  # the weights and config the chunk runs with
    span: int = 0  # latents the chunk's tokens cover (anchors included)
    generate: tuple[int, int] = (0, 0)  # latents it keeps, relative to its first token
    history: tuple[int, ...] = ()  # history K/V frames, relative to its first token
    publish: int = 0  # latents published after it
    first: bool = False  # the publish starts the stream (the decoder has not started)
    interp: bool = False  # the session runs I chunks
    owner: int = 0  # nonzero (the session's id) for work that batches with no other session
    render: Render = Render.DECODED  # how the frames published after it are made


def draw_key(render: Render, frames: int, engine: Hashable = None) -> BatchKey:
    """The key of drawing ``frames`` frames of a session rendered ``render`` apart from its chunks."""
    return BatchKey(DRAW, 0, False, engine, frames, render=render)


@dataclass
class BatchResult:
    """The frames each session of a batch published, in the batch's order, and what the
    batch cost per stage (seconds, all sessions together; a stage that did not run is absent)."""

    frames: list[list[PublishedFrame]]
    timings: dict[str, float] = field(default_factory=dict)


def shared_key(sessions: Sequence[object], keys: Sequence[BatchKey | None], engine: Hashable) -> BatchKey | None:
    """The one key ``sessions`` (with ``keys``) run under on ``engine``; None when none of them
    has work. A batch of mixed keys, of another engine's sessions or with a session twice
    cannot run: ValueError."""
    if len({id(s) for s in sessions}) != len(sessions):
        raise ValueError("a session appears twice in one batch")
    if any(k != keys[0] for k in keys):
        raise ValueError(f"sessions with different batch keys cannot run together: {set(keys)}")
    key = keys[0] if keys else None
    if key is not None and key.engine != engine:
        raise ValueError("these sessions run on other weights or another config")
    return key
