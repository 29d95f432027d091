"""Every rank runs the same pipeline over the same sessions (SPMD), so that each can hold its
own share of every session's rolling state (its tokens' or its blocks' K/V) and join the
collectives inside the DiT at the same points.

Rank 0 is the engine the callers see (``MirroredPipeline``): each call that changes a
session (open, feed, close input, silence, quality, step) is replayed on the other ranks in
the same order. Calls that only change audio buffers are queued and sent with the next one
that must run in lockstep (an open encodes the reference through the DiT, a step runs it),
so a session costs one message per step, not one per audio block. Only rank 0 publishes
frames; the others keep the schedule's counters as publishing would (``FollowerPipeline``).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from engine.batch import BatchResult
from engine.frames import PublishedFrame
from engine.pipeline import Pipeline, StreamSession
from engine.quality import Quality
from engine.stages.decode_publish import frame_span

if TYPE_CHECKING:
    from engine.photo.avatar import PhotoAvatar

Variant = tuple[tuple[str, object], ...]  # how a sibling pipeline derives from the root: (("preset", "fast"),)


@dataclass(frozen=True)
class Open:
    sid: int
    avatar: str | None
    photo: PhotoAvatar | None
    seed: int
    variant: Variant = ()
    drawn: bool = False


@dataclass(frozen=True)
class Feed:
    sid: int
    pcm: np.ndarray


@dataclass(frozen=True)
class CloseInput:
    sid: int


@dataclass(frozen=True)
class Rewrite:
    sid: int
    start: int
    pcm: np.ndarray


@dataclass(frozen=True)
class Silence:
    sid: int
    sample: int


@dataclass(frozen=True)
class SetQuality:
    sid: int
    quality: Quality


@dataclass(frozen=True)
class Step:
    sids: tuple[int, ...]


@dataclass(frozen=True)
class Drop:
    sid: int


@dataclass(frozen=True)
class Call:
    """``fn(rank_context, *args)`` on every rank (a picklable module-level function); with
    ``reply`` each rank sends its result back to rank 0."""

    fn: Callable
    args: tuple = ()
    reply: bool = False


@dataclass(frozen=True)
class Stop:
    pass


Command = Open | Feed | CloseInput | Rewrite | Silence | SetQuality | Step | Drop | Call | Stop


class FollowerPipeline(Pipeline):
    """A rank other than 0: the same schedule and DiT work, no frames. Publishing only moves
    the counters, as rank 0's does, so both ranks take the same next chunk."""

    def publish(self, sessions: Sequence[StreamSession], spans: list[tuple[int, int]],
                timings: dict[str, float]) -> list[list[PublishedFrame]]:
        td = self.config.vae.temporal_down
        for s, (lo, hi) in zip(sessions, spans, strict=True):
            if hi <= lo:
                continue
            start, end = frame_span(lo, hi - lo, td)
            limit = s.frame_limit()
            s.state.counters.published = hi
            s.state.counters.frames += max(0, (end if limit is None else min(end, limit)) - start)
        return [[] for _ in sessions]


def derive(pipe: Pipeline, variant: Variant) -> Pipeline:
    """The sibling of ``pipe`` (same models) that ``variant`` names, e.g. a quality preset's."""
    for method, arg in variant:
        pipe = getattr(pipe, method)(arg)
    return pipe


class Replica:
    """A follower's sessions, driven by rank 0's commands."""

    def __init__(self, pipe: Pipeline) -> None:
        self.pipe = pipe
        self.sessions: dict[int, StreamSession] = {}
        self.owners: dict[int, Pipeline] = {}  # the sibling pipeline each session was opened on
        self.variants: dict[Variant, Pipeline] = {(): pipe}

    def apply(self, cmd: Command, context: object) -> object:
        match cmd:
            case Open(sid, avatar, photo, seed, variant, drawn):
                if variant not in self.variants:
                    self.variants[variant] = derive(self.pipe, variant)
                owner = self.variants[variant]
                try:
                    self.sessions[sid] = owner.open_session(avatar=avatar, photo=photo, seed=seed, drawn=drawn)
                except (KeyError, ValueError):  # refused on rank 0 just the same, before any collective
                    return None
                self.owners[sid] = owner
            case Feed(sid, pcm):
                self.sessions[sid].feed(pcm)
            case CloseInput(sid):
                self.sessions[sid].close_input()
            case Rewrite(sid, start, pcm):
                self.sessions[sid].rewrite(start, pcm)
            case Silence(sid, sample):
                self.sessions[sid].silence_from(sample)
            case SetQuality(sid, quality):
                self.sessions[sid].set_quality(quality)
            case Step(sids):
                self.owners[sids[0]].step_batch([self.sessions[sid] for sid in sids])
            case Drop(sid):
                self.sessions.pop(sid, None)
                self.owners.pop(sid, None)
            case Call(fn, args):
                return fn(context, *args)
        return None


class Channel(Protocol):
    """What the mirror needs of the other ranks (``engine.parallel.ranks.RankGroup``)."""

    def send(self, commands: list[Command]) -> None: ...

    def replies(self) -> list[object]: ...

    def check(self) -> None: ...

    def lose(self, reason: str) -> Exception: ...

    def close(self) -> list[int]: ...


# Attributes of the local pipeline that are safe to read on rank 0 alone.
_READ_ONLY = frozenset({
    "config", "device", "steps", "steps_for", "models", "weights_loaded", "batch_engine", "schedule", "context_gen",
    "fps", "sample_rate", "frame_size", "frames_per_chunk", "first_chunk_samples", "accepts_images", "renders",
    "draws_apart",
})


class Mirror:
    """What rank 0's pipeline and its siblings share: the channel to the other ranks, the
    queue of commands not sent yet, session ids.

    ``lock`` serialises changes and lockstep work: a change is made here and queued under it,
    and a step sends the queue and runs under it, so every rank decides its next chunk from the
    same audio (a feed from another thread waits for a running step)."""

    def __init__(self, channel: Channel, context: object) -> None:
        self.channel = channel
        self.context = context
        self.ids = itertools.count()
        self.queued: list[Command] = []
        self.lock = threading.RLock()  # re-entrant: a session collected during a step queues its Drop
        self.live: weakref.WeakSet[MirroredSession] = weakref.WeakSet()

    def change(self, cmd: Command, here: Callable[[], object] = lambda: None) -> object:
        """Make a change here (``here``) and queue it for the other ranks, as one step."""
        with self.lock:
            result = here()
            self.queued.append(cmd)
            return result

    def lockstep(self, cmd: Command, here: Callable[[], object] = lambda: None) -> object:
        """Send what is queued and ``cmd``, then run rank 0's part (``here``) while the other
        ranks run theirs. Any failure of that part (a collective that broke, a rank that died)
        ends the group: the ranks cannot be brought back in step."""
        with self.lock:
            batch, self.queued = [*self.queued, cmd], []
            self.channel.send(batch)
            try:
                return here()
            except Exception as exc:
                if isinstance(cmd, Open) and isinstance(exc, KeyError | ValueError):
                    raise  # a refused session: refused on every rank alike, before any collective
                raise self.channel.lose(f"{exc.__class__.__name__}: {exc}") from exc


class MirroredPipeline:
    """Rank 0's pipeline, with every session-changing call replayed on the other ranks."""

    render = Pipeline.render

    def __init__(self, local: Pipeline, mirror: Mirror, variant: Variant = ()) -> None:
        self.local = local
        self.mirror = mirror
        self.variant = variant

    def __getattr__(self, name: str) -> object:
        if name in _READ_ONLY:
            return getattr(self.local, name)
        raise AttributeError(f"{name!r} is not available on an engine spread over several ranks")

    def _sibling(self, method: str, arg: object) -> MirroredPipeline:
        local = getattr(self.local, method)(arg)
        if local is self.local:
            return self
        return MirroredPipeline(local, self.mirror, (*self.variant, (method, arg)))

    def preset(self, name: str) -> MirroredPipeline:
        return self._sibling("preset", name)

    def with_interp(self, interp: bool) -> MirroredPipeline:
        return self._sibling("with_interp", interp)

    def open_session(self, avatar: str | None = None, image: np.ndarray | None = None,
                     seed: int = 0, photo: PhotoAvatar | None = None, drawn: bool = False) -> MirroredSession:
        if image is not None and photo is None:  # the face is found once, here, not on every rank
            from engine.photo.avatar import photo_avatar

            photo = photo_avatar(image)
        mirror = self.mirror
        sid = next(mirror.ids)
        local = mirror.lockstep(Open(sid, avatar, photo, seed, self.variant, drawn),
                                lambda: self.local.open_session(avatar=avatar, photo=photo, seed=seed, drawn=drawn))
        session = MirroredSession(self, sid, local)
        weakref.finalize(session, mirror.change, Drop(sid))
        mirror.live.add(session)
        return session

    def step_batch(self, sessions: Sequence[MirroredSession]) -> BatchResult:
        return self.mirror.lockstep(Step(tuple(s.sid for s in sessions)),
                                    lambda: self.local.step_batch([s.local for s in sessions]))

    def call(self, fn: Callable, *args: object) -> list[object]:
        """``fn(context, *args)`` on every rank at once; every rank's result, rank 0's first."""
        mirror = self.mirror
        with mirror.lock:
            mine = mirror.lockstep(Call(fn, args, reply=True), lambda: fn(mirror.context, *args))
            return [mine, *mirror.channel.replies()]

    @property
    def open_sessions(self) -> int:
        return len(self.mirror.live)

    def check(self) -> None:
        """Raise ``RanksLost`` if a rank has ended (the engine worker checks between batches)."""
        self.mirror.channel.check()

    def close(self) -> list[int]:
        """End every rank; their exit statuses (0: a clean end)."""
        return self.mirror.channel.close()


class MirroredSession:
    """Rank 0's session; its changes go to the other ranks' copies."""

    frames = StreamSession.frames

    def __init__(self, pipe: MirroredPipeline, sid: int, local: StreamSession) -> None:
        self.pipe = pipe
        self.sid = sid
        self.local = local

    def __getattr__(self, name: str) -> object:
        return getattr(self.local, name)

    def feed(self, pcm: np.ndarray) -> None:
        pcm = np.asarray(pcm, dtype=np.float32).reshape(-1).copy()
        self.pipe.mirror.change(Feed(self.sid, pcm), lambda: self.local.feed(pcm))

    def close_input(self) -> None:
        self.pipe.mirror.change(CloseInput(self.sid), self.local.close_input)

    def rewrite(self, start: int, pcm: np.ndarray) -> int:
        pcm = np.asarray(pcm, dtype=np.float32).reshape(-1).copy()
        return self.pipe.mirror.change(Rewrite(self.sid, start, pcm), lambda: self.local.rewrite(start, pcm))

    def silence_from(self, sample: int) -> int:
        return self.pipe.mirror.change(Silence(self.sid, sample), lambda: self.local.silence_from(sample))

    def set_quality(self, quality: Quality) -> None:
        # refused here (raising before it is queued) what the other ranks would refuse too
        self.pipe.mirror.change(SetQuality(self.sid, quality), lambda: self.local.set_quality(quality))

    def step(self) -> list[PublishedFrame]:
        return self.pipe.step_batch([self]).frames[0]
