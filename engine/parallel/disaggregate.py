"""The DiT on one device, SR and the decoder on another, pipelined: chunk k is decoded (on a
thread of its own, on the decoder's device) while chunk k+1 denoises.

A step generates its chunk and hands the chunk's publish to the decoder thread; the frames a
step returns are those of earlier chunks whose decode has finished. At most one chunk per
session decodes behind the DiT (a step waits for the older one), a session's very first
frames are waited for (first-frame latency is not traded for throughput), and the end of a
stream waits for everything. The decoder thread publishes chunks in the order they were
generated, so each session's decoder cache and deblocking frame follow their chunks; only
the main thread changes a session's latents and audio, and published latents never change.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from engine.batch import BatchResult
from engine.config import EngineConfig
from engine.frames import PublishedFrame
from engine.models import compute_dtype
from engine.pipeline import Pipeline, StreamSession


class DisaggregatedPipeline(Pipeline):
    decoder_device: str | None = None

    def place_decoder(self, device: str) -> None:
        """SR and the decoder on ``device`` (in the compute dtype it takes there)."""
        dtype = compute_dtype(self.config.dtype, device)
        for module in (self.models.sr, self.models.decoder):
            module.place(device, dtype)
        self.decoder_device = device
        self._decoder = ThreadPoolExecutor(1, thread_name_prefix="avatar-decode")
        # each session's publishes not yet taken: (job, the session's row in it, the job's timings)
        self._pending: weakref.WeakKeyDictionary[StreamSession, deque] = weakref.WeakKeyDictionary()
        self._published: weakref.WeakSet[StreamSession] = weakref.WeakSet()
        self._in_place = False

    def _sibling(self, config: EngineConfig, steps: int | None = None) -> DisaggregatedPipeline:
        """A preset's pipeline over the same models decodes on the same thread, in one order."""
        pipe = super()._sibling(config, steps)
        if self.decoder_device is not None:
            pipe.decoder_device, pipe._decoder = self.decoder_device, self._decoder
            pipe._pending, pipe._published, pipe._in_place = self._pending, self._published, False
        return pipe

    def publish(self, sessions: Sequence[StreamSession], spans: list[tuple[int, int]],
                timings: dict[str, float]) -> list[list[PublishedFrame]]:
        if self._in_place or self.decoder_device is None:
            return super().publish(sessions, spans, timings)
        job_timings: dict[str, float] = {}
        job: Future = self._decoder.submit(super().publish, sessions, spans, job_timings)
        for row, s in enumerate(sessions):
            self._pending.setdefault(s, deque()).append((job, row, job_timings))
        return [[] for _ in sessions]

    def _take(self, s: StreamSession, everything: bool, timings: dict[str, float]) -> list[PublishedFrame]:
        """The session's finished publishes, in order: all of them if ``everything`` or it has
        published nothing yet, else waiting only while more than one is outstanding."""
        jobs = self._pending.get(s, deque())
        frames: list[PublishedFrame] = []
        while jobs and (everything or s not in self._published or len(jobs) > 1 or jobs[0][0].done()):
            job, row, job_timings = jobs.popleft()
            frames += job.result()[row]
            for stage, secs in job_timings.items():
                timings[stage] = timings.get(stage, 0.0) + secs
            if frames:
                self._published.add(s)
        return frames

    def step_batch(self, sessions: Sequence[StreamSession]) -> BatchResult:
        if self.decoder_device is None:
            return super().step_batch(sessions)
        key = sessions[0].batch_key() if sessions else None
        tail = key is not None and key.kind == "tail"
        timings: dict[str, float] = {}
        earlier = [self._take(s, tail, timings) for s in sessions] if tail else [[] for _ in sessions]
        self._in_place = tail  # the end of a stream publishes what is left here, after the rest
        try:
            result = super().step_batch(sessions)
        finally:
            self._in_place = False
        for stage, secs in result.timings.items():
            timings[stage] = timings.get(stage, 0.0) + secs
        frames = [e + f + self._take(s, False, timings) for e, f, s in zip(earlier, result.frames, sessions,
                                                                            strict=True)]
        for s in sessions:
            s.timings = dict(timings)
        return BatchResult(frames, timings)
