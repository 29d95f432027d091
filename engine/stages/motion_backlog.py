"""MotionBacklog: a hearing redrawn session's read motion, waiting for the audio its frames' mouths need.

A redrawn session that hears its own audio (``engine.stages.redraw``) takes its mouth from what
it hears, not from the DiT, so a frame can be drawn as soon as its mouth is heard: its audio
through the tracker's lookahead. Waiting instead for the DiT chunk that holds the frame costs the
rest of that chunk's audio and its compute, up to a quarter of a second more between a voice and
the mouth on screen. The head, eyes and brows of frame ``f`` are therefore the DiT's read motion of
frame ``f - lag``: the chunk that made it has run by the time frame ``f``'s mouth is heard. The head
follows the voice ``lag`` frames late, as a listener's nod follows the word it answers; the mouth
never does.

Memory: the motions of at most ``lag`` frames before the next frame to draw, and of what the DiT
read ahead of it (a chunk or two).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.puppet import FaceState

# Frames a hearing redrawn frame's head lags its mouth: enough for the DiT chunk holding frame
# f - lag to have run (the rest of its audio, its context's lookahead and its compute, with other
# sessions queued) by the time frame f's mouth is heard.
POSE_LAG_FRAMES = 6


@dataclass
class MotionBacklog:
    """Read motions by frame index, and how far drawing has come."""

    lag: int = POSE_LAG_FRAMES
    motions: dict[int, tuple[FaceState, str]] = field(default_factory=dict)  # frame -> motion, its chunk
    read: int = 0  # frames [0, read) have their motion read
    drawn: int = 0  # frames [0, drawn) are drawn

    def __post_init__(self) -> None:
        if self.lag < 0:
            raise ValueError(f"lag must be non-negative, got {self.lag}")

    def add(self, first: int, motions: Sequence[FaceState], chunk: Sequence[str]) -> None:
        """The motions read for frames ``first`` on, in order, each with the chunk that made it (none:
        the frames were past the stream's end)."""
        if not motions:
            return
        if first != self.read:
            raise ValueError(f"motion of frame {first} read, but frame {self.read} is next")
        for k, (motion, made_by) in enumerate(zip(motions, chunk, strict=True)):
            self.motions[first + k] = (motion, made_by)
        self.read += len(motions)

    def source(self, frame: int) -> int:
        """The frame whose read motion frame ``frame`` is drawn at."""
        return max(0, frame - self.lag)

    def drawable(self, heard: int, limit: int | None, most: int | None = None) -> range:
        """The next frames that can be drawn: their mouths heard (frames before ``heard``), their
        motions read, and before the stream's end ``limit`` (None: open); at most ``most``."""
        end = min(heard, self.read + self.lag) if self.read else self.drawn
        if limit is not None:
            end = min(end, limit)
        if most is not None:
            end = min(end, self.drawn + most)
        return range(self.drawn, max(self.drawn, end))

    def ahead(self) -> int:
        """Motions read beyond what the next frame to draw is drawn at."""
        return self.read - self.source(self.drawn)

    def take(self, frames: range) -> tuple[list[FaceState], list[str]]:
        """The motions ``frames`` (the next ones to draw) are drawn at, and their chunks; what no
        later frame needs is let go."""
        if frames.start != self.drawn:
            raise ValueError(f"frames from {frames.start} drawn, but frame {self.drawn} is next")
        picked = [self.motions[self.source(f)] for f in frames]
        self.drawn = frames.stop
        for gone in [f for f in self.motions if f < self.source(self.drawn)]:
            del self.motions[gone]
        return [m for m, _ in picked], [c for _, c in picked]
