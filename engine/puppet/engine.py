"""The puppet as an engine: the procedural renderer behind the learned pipeline's surface.

``avatar render|bench|serve|eval --config puppet`` draw a bundled identity with ``render``
from a streaming ``FaceTracker``: no sampling, the mouth from what a speech encoder hears
(``engine.speech``). It is the reference the learned model is compared against, and a
cheap engine for working on everything around it. Frames are published in chunks of
``chunk_frames`` once their audio and the tracker's lookahead are in; the last partial frame
is zero-padded, as the learned pipeline does.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import numpy as np

from engine.avatars import DEFAULT_AVATAR
from engine.batch import BatchKey, BatchResult, Render, shared_key
from engine.config import PUPPET, ConfiguredEngine, EngineConfig, get_config
from engine.frames import PublishedFrame, drain, stream_frames
from engine.presets import preset_named
from engine.puppet.draw import render
from engine.puppet.identity import Identity, get_identity
from engine.puppet.state import FaceState
from engine.puppet.stream import FaceTracker
from engine.quality import Quality
from engine.state import AudioBuffer, AudioFed

CHUNK_FRAMES = 4


class PuppetPipeline(ConfiguredEngine):
    """The procedural engine: same attributes and methods as ``engine.pipeline.Pipeline``
    where its callers use them; ``steps`` is 0 and ``weights_loaded`` empty (no model)."""

    accepts_images = False
    renders: tuple[Render, ...] = (Render.DRAWN,)  # every frame is drawn

    def __init__(self, config: EngineConfig | None = None, chunk_frames: int = CHUNK_FRAMES) -> None:
        config = config or get_config(PUPPET)
        if config.vae.height != config.vae.width:
            raise ValueError(f"the puppet draws square frames, not {config.vae.width}x{config.vae.height}")
        if chunk_frames < 1:
            raise ValueError(f"chunk_frames must be >= 1, got {chunk_frames}")
        self.config = config
        self.chunk_frames = chunk_frames
        self.device = "cpu"
        self.steps = 0
        self.weights_loaded: list[str] = []
        self.batch_engine = (PUPPET, id(self))

    @classmethod
    def from_config(cls, name: str | EngineConfig = PUPPET, device: str = "cpu", steps: int | None = None,
                    weights: str | Path | None = None, dtype: str | None = None,
                    guidance: float | None = None) -> PuppetPipeline:
        """``Pipeline.from_config``'s puppet branch: settings that only mean something for a
        learned model fail clearly instead of being silently ignored."""
        config = get_config(name) if isinstance(name, str) else name
        if device != "cpu":
            raise ValueError(f"the puppet engine draws on the CPU; got device {device!r}")
        for flag, value in (("steps", steps), ("weights", weights), ("dtype", dtype), ("guidance", guidance)):
            if value is not None:
                raise ValueError(f"the puppet engine has no model: {flag} does not apply")
        return cls(config)

    @property
    def frames_per_chunk(self) -> int:
        return self.chunk_frames

    @property
    def first_chunk_samples(self) -> int:
        """Audio samples the first chunk needs: its own frames and the tracker's lookahead."""
        return self.chunk_frames * self.config.samples_per_frame + self.lookahead

    @property
    def lookahead(self) -> int:
        """Samples past a chunk's last frame the face tracker waits for."""
        return FaceTracker.lookahead_samples(self.sample_rate, self.fps)

    def with_interp(self, interp: bool) -> PuppetPipeline:
        """The puppet has no I chunks: the same pipeline either way."""
        return self

    def preset(self, name: str) -> PuppetPipeline:
        """The puppet draws every preset the same way."""
        preset_named(name)
        return self

    def steps_for(self, render: Render) -> int:
        """Nothing to denoise, whichever way the frames are made."""
        return self.steps

    def open_session(self, avatar: str | Identity | None = None, image: np.ndarray | None = None,
                     seed: int = 0, photo: object | None = None, drawn: bool = False) -> PuppetSession:
        """A session drawing ``avatar`` (a bundled name, or an ``Identity`` such as the held-out
        ones of ``avatar eval``); ``seed`` picks the blinks, gaze and head motion. ``drawn`` is
        accepted as the learned pipeline takes it and changes nothing: these frames are drawn."""
        if image is not None or photo is not None:
            raise ValueError("the puppet engine draws its bundled identities, not reference images; "
                             "pass avatar=NAME (--avatar NAME)")
        identity = avatar if isinstance(avatar, Identity) else get_identity(avatar or DEFAULT_AVATAR)
        return PuppetSession(self, identity, seed)

    def render(self, pcm: np.ndarray, avatar: str | Identity | None = None, image: np.ndarray | None = None,
               seed: int = 0) -> Iterator[PublishedFrame]:
        """Batch mode: the whole audio at once, frames as each chunk is drawn."""
        session = self.open_session(avatar, image, seed)
        session.feed(pcm)
        session.close_input()
        return drain(session)

    def step_batch(self, sessions: Sequence[PuppetSession]) -> BatchResult:
        """``Pipeline.step_batch``'s surface: drawing has no batched form, so the sessions
        (all of one batch key) are drawn one after the other; timings add up."""
        shared_key(sessions, [s.batch_key() for s in sessions], self.batch_engine)
        frames: list[list[PublishedFrame]] = []
        timings: dict[str, float] = {}
        for s in sessions:
            frames.append(s.draw_next())
            for stage, secs in s.timings.items():
                timings[stage] = timings.get(stage, 0.0) + secs
        return BatchResult(frames, timings)


class PuppetSession(AudioFed):
    """One stream: audio in, one face state per frame from the streaming tracker, each frame
    drawn and published once, in order. Holds the tracker's constant-size state and the
    audio not yet published."""

    def __init__(self, pipeline: PuppetPipeline, identity: Identity, seed: int) -> None:
        self.pipe = pipeline
        self.identity = identity
        self.seed = seed
        self.audio = AudioBuffer()
        self.tracker = FaceTracker(pipeline.sample_rate, pipeline.fps, seed)
        self.pushed = 0  # samples handed to the tracker
        self.states: list[FaceState] = []  # tracked, not yet drawn: the tail the input's end brings at once
        self.finished = False
        self.timings: dict[str, float] = {}
        self.last_chunk = ""
        self.chunks_run = 0
        self.published = 0  # frames
        self.quality = Quality(interp=False)
        self._spf = pipeline.config.samples_per_frame

    @property
    def frame_size(self) -> tuple[int, int]:
        return self.pipe.frame_size

    @property
    def first_chunk_samples(self) -> int:
        return self.pipe.first_chunk_samples

    @property
    def lookahead_samples(self) -> int:
        """Audio past a frame's end the tracker waits for: fed again that far back (``rewrite``),
        audio still reaches frames not made yet."""
        return self.pipe.lookahead

    def set_quality(self, quality: Quality) -> None:
        """Kept and reported, nothing more: the puppet has no I chunks, steps or guidance."""
        self.quality = quality

    def _next_count(self, limit: int | None) -> int:
        """Frames the next step publishes: a whole chunk once its audio is in, the rest at the end."""
        if limit is not None:
            return min(self.pipe.chunk_frames, limit - self.published)
        whole = (self.audio.total - self.pipe.lookahead) // self._spf - self.published
        return self.pipe.chunk_frames if whole >= self.pipe.chunk_frames else 0

    def ready(self) -> bool:
        if self.finished:
            return False
        limit = self.frame_limit()
        return limit is not None or self._next_count(limit) > 0

    def batch_key(self) -> BatchKey | None:
        """Chunks of ``chunk_frames`` frames share a key; the stream's last one is its own."""
        if not self.ready():
            return None
        limit = self.frame_limit()
        count = self._next_count(limit)
        if limit is not None and self.published + count >= limit:
            return BatchKey("tail", 0, False, self.pipe.batch_engine, publish=count, owner=id(self),
                            render=Render.DRAWN)
        return BatchKey("N", 0, False, self.pipe.batch_engine, publish=count, render=Render.DRAWN)

    def step(self) -> list[PublishedFrame]:
        """Draw the next chunk if its audio is in; returns its frames (none if it is not)."""
        return self.pipe.step_batch([self]).frames[0]

    def draw_next(self) -> list[PublishedFrame]:
        if self.finished:
            return []
        self.timings = {}
        limit = self.frame_limit()
        count = self._next_count(limit)
        frames = self._publish(count, last=limit is not None and self.published + count >= limit) if count else []
        if limit is not None and self.published >= limit:
            self.finished = True
        return frames

    def _publish(self, count: int, last: bool) -> list[PublishedFrame]:
        lo, spf = self.published, self._spf
        name = f"N{self.chunks_run}"
        t0 = time.perf_counter()
        audio = self.audio.read(lo * spf, (lo + count) * spf)  # zero past the end: the last frame padded
        self.states += self._track((lo + count) * spf + self.pipe.lookahead)
        states, self.states = self.states[:count], self.states[count:]
        if len(states) != count:
            raise RuntimeError(f"face tracker gave {len(states)} states for {count} frames")
        self.timings["track"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        size = self.pipe.frame_size[0]
        fps, sr = self.pipe.fps, self.pipe.sample_rate
        frames = [
            PublishedFrame(lo + i, fps, render(self.identity, state, size), audio[i * spf:(i + 1) * spf], sr, name)
            for i, state in enumerate(states)
        ]
        self.timings["render"] = time.perf_counter() - t0
        self.published += count
        self.chunks_run += 1
        self.last_chunk = name
        self.audio.release_before(self.published * spf)
        return frames

    def _track(self, heard: int) -> list[FaceState]:
        """States of the audio up to sample ``heard``; once the input is closed and that reaches
        its end, of all of it (the tracker closed)."""
        changed = self.audio.take_changed()
        if changed is not None:
            self.pushed = min(self.pushed, self.tracker.rewind(changed))
        if self.audio.closed and heard >= self.audio.total:
            if self.tracker.closed:
                return []
            states = self.tracker.push(self.audio.read(self.pushed, self.audio.total)) + self.tracker.close()
        else:
            states = self.tracker.push(self.audio.read(self.pushed, heard))
        self.pushed = min(heard, self.audio.total)
        return states

    def nbytes(self) -> int:
        """Bytes held between steps: the tracker's state and the audio not yet published."""
        return self.tracker.nbytes() + self.audio.nbytes()

    def frames(self) -> AsyncIterator[PublishedFrame]:
        """Async streaming: yields frames as chunks are drawn; drawing runs in a worker thread."""
        return stream_frames(self)
