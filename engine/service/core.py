"""EngineCore: every session of one worker, their rolling state, and one scheduler over all.

Synchronous and free of I/O: the worker loop (``engine.service.worker``) feeds it commands
and runs ``step()``; tests drive it directly. Each step asks the scheduler for the most
urgent batch, runs it as one batched call of the pipeline, records what it cost, and lets
the quality controller move sessions up or down the quality ladder from their projected
slack. A session runs only while it holds free frame slots: its credit with playout.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from engine.batch import BatchKey, Render, draw_key
from engine.frames import PublishedFrame
from engine.presets import DEFAULT_PRESET, Preset
from engine.quality import Quality, quality_ladder
from engine.service.costs import CostModel
from engine.service.messages import EngineInfo, SessionSpec
from engine.service.scheduler import (
    MOST_SESSIONS,
    Candidate,
    QualityChange,
    QualityController,
    plan_batch,
    project_slack,
    sessions_in_real_time,
)

VOICE_RMS = 0.01  # audio blocks louder than this count as speech
VOICE_HOLD_S = 1.0  # a session counts as speaking this long after its last voiced block
START_BUDGET_S = 0.3  # before playout starts, a session's next chunk is due this long after it opened


class SessionRefused(ValueError):
    """The request's fault (unknown avatar, unusable image, unknown preset): not the engine's."""


class BatchedSession(Protocol):
    """One engine session as the core drives it (``StreamSession``, ``PuppetSession``); its
    pipeline runs several of them at once with ``step_batch``."""

    first_chunk_samples: int  # audio its first chunk needs before it can run
    lookahead_samples: int  # audio fed again this far back from the end still reaches its frames

    def feed(self, pcm: np.ndarray) -> None: ...
    def rewrite(self, start: int, pcm: np.ndarray) -> int: ...
    def batch_key(self) -> BatchKey | None: ...
    def set_quality(self, quality: Quality) -> None: ...
    def silence_from(self, sample: int) -> int: ...
    def nbytes(self) -> int: ...


@dataclass
class CoreSession:
    id: str
    stream: BatchedSession
    pipe: object  # the preset's pipeline: its step_batch runs this session's batches
    preset: str
    ladder: tuple[Quality, ...]
    free_slots: deque[int]
    opened_at: float = 0.0
    origin: float | None = None  # frame n due at origin + n / fps
    fed: int = 0  # samples fed
    voiced_until: int = 0  # sample index up to which the session counts as speaking
    published: int = 0  # frames published so far (the next frame's index)
    level: int = 0


@dataclass(frozen=True)
class StepOutcome:
    frames: dict[str, list[tuple[int, PublishedFrame]]]  # session -> (slot, frame)
    batch: tuple[str, ...]
    seconds: float
    changes: tuple[QualityChange, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)  # session -> message


PRIOR_S = 0.2  # a chunk's cost assumed per session before anything of its kind was measured


def presets_of(pipes: dict, guided: bool, render: Render = Render.DECODED) -> dict[str, tuple[Quality, ...]]:
    """Each preset's ladder from its own steps for sessions rendered ``render``: ``quality`` walks the
    whole ladder; ``fast`` has no I chunks to give up."""
    def steps(name: str) -> int:
        return max(1, pipes[name].steps_for(render) or 1)

    return {Preset.QUALITY: quality_ladder(steps(Preset.QUALITY), True, guided),
            Preset.FAST: quality_ladder(steps(Preset.FAST), False, guided)}


class EngineCore:
    def __init__(self, pipeline, info: EngineInfo, clock: Callable[[], float] = time.monotonic,
                 costs: CostModel | None = None, margin_s: float = 0.04, max_batch: int = 16,
                 slot_frames: int | None = None, default_preset: str = DEFAULT_PRESET,
                 capacity_margin: float = 0.2, default_render: Render = Render.DECODED) -> None:
        self.pipe = pipeline
        self.pipes = {name: pipeline.preset(name) for name in Preset}
        self.info = info
        self.clock = clock
        self.costs = costs or CostModel(prior_s=PRIOR_S)
        self.margin_s = margin_s
        self.max_batch = max_batch
        cfg = pipeline.config
        guided = cfg.audio_guidance != 1.0
        self.ladders = {render: presets_of(self.pipes, guided, render) for render in Render}
        self.presets = self.ladders[Render.DECODED]  # the names; each render's steps in ``ladders``
        if default_preset not in self.presets:
            raise ValueError(f"unknown preset {default_preset!r}")
        self.default_preset = default_preset
        # How the sessions that do not say are rendered (what the capacity figure counts); an
        # engine that makes its frames one way only renders every session that way.
        self.default_render = default_render if default_render in pipeline.renders else pipeline.renders[0]
        self.capacity_margin = capacity_margin
        self.step_frames = info.step_frames
        self.slot_frames = slot_frames or 2 * self.step_frames
        self.sessions: dict[str, CoreSession] = {}
        self.quality = QualityController()
        self.batches = 0
        self.batched_sessions = 0

    # ---- commands ------------------------------------------------------------------------

    def open(self, sid: str, spec: SessionSpec, slot_count: int) -> CoreSession:
        if sid in self.sessions:
            raise SessionRefused(f"session {sid} is already open")
        if spec.preset not in self.presets:
            raise SessionRefused(f"unknown preset {spec.preset!r}; choose one of: {', '.join(self.presets)}")
        if slot_count < self.step_frames:
            raise SessionRefused(f"{slot_count} frame slots cannot hold one step ({self.step_frames} frames)")
        try:
            pipe = self.pipes[spec.preset]
            stream = pipe.open_session(avatar=spec.avatar, photo=spec.photo, seed=spec.seed, drawn=spec.drawn)
        except (KeyError, ValueError) as exc:
            raise SessionRefused(str(exc).strip("'\"")) from None
        ladder = self.ladders[spec.render][spec.preset]
        session = CoreSession(sid, stream, pipe, spec.preset, ladder, deque(range(slot_count)), opened_at=self.clock())
        stream.set_quality(ladder[0])
        self.sessions[sid] = session
        self.quality.add(sid, len(ladder))
        return session

    def push(self, sid: str, start: int, samples: np.ndarray) -> None:
        """Audio for samples ``[start, start + len)``: a gap is filled with silence; an overlap
        replaces what was fed there (frames made of it stay as they were)."""
        s = self.sessions.get(sid)
        if s is None:
            return
        if start > s.fed:
            gap = np.zeros(start - s.fed, np.float32)
            s.stream.feed(gap)
            s.fed += gap.size
        if samples.size and float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) > VOICE_RMS:
            s.voiced_until = start + samples.size + int(VOICE_HOLD_S * self.info.sample_rate)
        if start < s.fed:
            s.stream.rewrite(start, samples[:s.fed - start])
            samples = samples[s.fed - start:]
        if samples.size == 0:
            return
        s.stream.feed(samples)
        s.fed += samples.size

    def silence_from(self, sid: str, sample: int) -> None:
        s = self.sessions.get(sid)
        if s is not None:
            s.stream.silence_from(sample)
            s.voiced_until = min(s.voiced_until, sample)

    def set_origin(self, sid: str, origin: float) -> None:
        if sid in self.sessions:
            self.sessions[sid].origin = origin

    def release(self, sid: str, slots: tuple[int, ...]) -> None:
        s = self.sessions.get(sid)
        if s is not None:
            s.free_slots.extend(slots)

    def close(self, sid: str) -> None:
        if self.sessions.pop(sid, None) is not None:
            self.quality.remove(sid)
            if not self.sessions:
                self.costs.forget_load()

    # ---- scheduling ----------------------------------------------------------------------

    def _deadline(self, s: CoreSession, now: float) -> float:
        """When the next published frame must play; before playout starts, soon after opening
        (the first frame should come fast, yet sessions opened together can share a batch)."""
        if s.origin is None:
            return s.opened_at + START_BUDGET_S
        return s.origin + s.published / self.info.fps

    def candidates(self, now: float) -> list[Candidate]:
        out = []
        for s in self.sessions.values():
            if len(s.free_slots) < self.step_frames:
                continue
            key = s.stream.batch_key()
            if key is None:
                continue
            speaking = s.voiced_until > s.published * self.info.samples_per_frame
            out.append(Candidate(s.id, key, cost_key(key), self._deadline(s, now), speaking))
        return out

    def due(self) -> bool:
        return bool(self.candidates(self.clock()))

    def step(self) -> StepOutcome | None:
        """Run the most urgent batch, if any work can run now."""
        now = self.clock()
        candidates = self.candidates(now)
        batch = plan_batch(now, candidates, self.costs, margin_s=self.margin_s, max_batch=self.max_batch)
        if batch is None:
            return None
        outcome = self.run([c.session for c in batch.members], batch.members[0].cost_key)
        if outcome.failed:
            return outcome
        return replace(outcome, changes=self._adapt_quality())

    def run(self, names: list[str], key: Hashable) -> StepOutcome:
        """Run these sessions' next chunks (one batch key) as one batched call and record its cost."""
        members = [self.sessions[name] for name in names]
        t0 = time.perf_counter()
        try:
            result = members[0].pipe.step_batch([s.stream for s in members])
        except Exception as exc:  # one bad batch fails its own sessions, not the worker
            message = f"{exc.__class__.__name__}: {exc}"
            for s in members:
                self.close(s.id)
            return StepOutcome({}, tuple(names), time.perf_counter() - t0, failed={n: message for n in names})
        seconds = time.perf_counter() - t0
        self.costs.observe(key, len(members), seconds)
        self.costs.observe_stages(key, len(members), result.timings)
        self.batches += 1
        self.batched_sessions += len(members)
        frames: dict[str, list[tuple[int, PublishedFrame]]] = {}
        for s, published in zip(members, result.frames, strict=True):
            if len(published) > len(s.free_slots):
                raise RuntimeError(f"session {s.id} published {len(published)} frames into "
                                   f"{len(s.free_slots)} free slots")
            frames[s.id] = [(s.free_slots.popleft(), f) for f in published]
            if published:
                s.published = published[-1].index + 1
        return StepOutcome(frames, tuple(names), seconds)

    def _adapt_quality(self) -> tuple[QualityChange, ...]:
        now = self.clock()
        candidates = self.candidates(now)
        if not candidates:
            return ()
        slack = project_slack(now, candidates, self.costs, margin_s=self.margin_s)
        changes = []
        for sid, value in slack.items():
            if self.sessions[sid].origin is None:  # not playing yet: its deadline is only "soon"
                continue
            change = self.quality.update(sid, value, now)
            if change is not None:
                s = self.sessions[sid]
                s.level = change.new
                s.stream.set_quality(s.ladder[s.level])
                changes.append(change)
        return tuple(changes)

    # ---- figures ------------------------------------------------------------------------

    def work_per_period(self, preset: str | None = None, render: Render | None = None) -> tuple[Hashable, ...]:
        """The cost keys one session of ``preset`` rendered as ``render`` (defaults: the worker's)
        at its best quality needs every chunk period."""
        pipe = self.pipes[preset or self.default_preset]
        render = render or self.default_render
        steps = getattr(pipe, "steps", 0)
        if not steps:  # a procedural engine: one drawing per chunk, nothing to denoise
            return (("N", 0, False, False, 0, render),)
        q = self.ladders[render][preset or self.default_preset][0]
        schedule, cfg = pipe.config.schedule, pipe.config
        guided = q.guidance and cfg.audio_guidance != 1.0
        work = [("N", q.steps or steps, guided, q.interp, schedule.chunk, render)]
        if q.interp:
            work.append(("I", min(steps, cfg.interp_steps), False, True, 2 * (schedule.seam + schedule.anchor),
                         render))
        if pipe.draws_apart(render):  # its frames drawn apart: one at a time with room, a chunk's at once when busy
            work.append(cost_key(draw_key(render, pipe.frames_per_chunk)))
        return tuple(work)

    def period_s(self, preset: str | None = None) -> float:
        """Media time one N chunk of ``preset`` adds."""
        return self.pipes[preset or self.default_preset].frames_per_chunk / self.info.fps

    def capacity(self) -> int:
        """More sessions of the default preset this worker can hold in real time at their best
        quality (never negative). An idle worker takes one session even where its estimate holds
        none (a machine too slow for the preset): refusing every session serves no one, and the
        quality controller runs that one at the cheapest rung of its ladder that keeps up. A
        negative ``capacity_margin`` counts no real-time bound at all: the web process's
        ``max_sessions`` is then the only one."""
        if self.capacity_margin < 0:
            return max(0, MOST_SESSIONS - len(self.sessions))
        return max(0, max(self.real_time_sessions(), 1) - len(self.sessions))

    def real_time_sessions(self, render: Render | None = None) -> int:
        """Sessions of the default preset, rendered as ``render`` (default: the worker's), the
        cost estimates hold in real time at their best quality."""
        return sessions_in_real_time(self.costs, self.work_per_period(render=render), self.period_s(),
                                     margin=self.capacity_margin)

    def real_time_by_render(self) -> dict[str, int]:
        """``real_time_sessions`` for each way this engine renders sessions (all of one way)."""
        return {str(render): self.real_time_sessions(render) for render in self.pipe.renders}

    @property
    def batch_mean(self) -> float:
        return self.batched_sessions / self.batches if self.batches else 0.0

    def state_bytes(self) -> dict[str, int]:
        return {sid: int(s.stream.nbytes()) for sid, s in self.sessions.items()}


def cost_key(key: BatchKey) -> Hashable:
    """What a batch costs depends on its kind, steps, guidance, whether I chunks run (an N chunk
    decodes its frames only without them), its span and how its frames are made, not on who is in it."""
    return (key.kind, key.steps, key.guided, key.interp, key.span, key.render)
