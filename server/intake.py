"""Agent speech intake: text (via TTS) and pushed PCM become utterances, in the order sent.

Text needs synthesis and pushed audio does not, so both go through one ordered queue
worked by one task: an ``audio.commit`` sent after a ``speak`` is never played before it.
``interrupt`` bumps a generation counter, so requests (and syntheses in flight) from before
it are dropped rather than played.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from server import tts
from server.audio import Resampler
from server.errors import ControlError
from server.metrics import ServerMetrics
from server.protocol import ErrorEvent, PlaybackFinished, ServerEvent, UtteranceQueued
from server.speech import BacklogFull, SpeechQueue, Utterance

INTAKE_QUEUE = 16


@dataclass(frozen=True)
class _Request:
    generation: int
    utterance_id: str
    text: str | None = None
    voice: str | None = None
    samples: np.ndarray | None = None


class SpeechIntake:
    def __init__(
        self,
        speech: SpeechQueue,
        sample_rate: int,
        max_text_chars: int,
        voice: str,
        emit: Callable[[ServerEvent], None],
        metrics: ServerMetrics,
    ) -> None:
        self.speech = speech
        self.sample_rate = sample_rate
        self.max_text_chars = max_text_chars
        self.voice = voice
        self._emit = emit
        self._metrics = metrics
        self._queue: asyncio.Queue[_Request] = asyncio.Queue(INTAKE_QUEUE)
        self._generation = 0
        self._ids = itertools.count(1)
        self._draft: list[np.ndarray] = []
        self._draft_samples = 0
        self._resampler: tuple[int, Resampler] | None = None

    @property
    def pending_samples(self) -> int:
        """Speech held for this session and not yet fed: queued plus appended-but-uncommitted."""
        return self.speech.pending_samples + self._draft_samples

    # ---- requests (called from the control socket's reader) ----------------------------

    def speak(self, text: str, utterance_id: str | None, voice: str | None) -> str:
        if len(text) > self.max_text_chars:
            raise ControlError("text_too_long", f"text is {len(text)} characters; the limit is {self.max_text_chars}")
        return self._submit(utterance_id, text=text, voice=voice or self.voice)

    def append(self, pcm: bytes, sample_rate: int) -> None:
        if len(pcm) % 2:
            raise ControlError("bad_audio", "PCM16 audio must have an even number of bytes")
        incoming = len(pcm) // 2 * self.sample_rate // sample_rate
        if self.pending_samples + incoming > self.speech.max_samples:
            raise ControlError(
                "audio_backlog",
                f"pushed audio would exceed the "
                f"{self.speech.max_samples / self.sample_rate:.0f} s backlog; "
                f"wait for playback or send interrupt",
            )
        if self._resampler is None or self._resampler[0] != sample_rate:
            self._flush_resampler()
            self._resampler = (sample_rate, Resampler(self.sample_rate))
        self._add_draft(self._resampler[1].push_pcm16(pcm, sample_rate))

    def commit(self, utterance_id: str | None) -> str:
        self._flush_resampler()
        if not self._draft_samples:
            raise ControlError("empty_commit", "audio.commit with no audio appended since the last commit")
        samples = np.concatenate(self._draft)
        uid = self._submit(utterance_id, samples=samples)
        self._draft, self._draft_samples = [], 0
        return uid

    def interrupt(self) -> Utterance | None:
        """Drop everything not yet fed; returns the utterance cut mid-way (if any) for the caller to close."""
        self._generation += 1
        while not self._queue.empty():
            self._queue.get_nowait()
        self._draft, self._draft_samples, self._resampler = [], 0, None
        cut, unstarted = self.speech.clear()
        for utt in unstarted:
            self._emit(PlaybackFinished(utterance_id=utt.id, pts=None, interrupted=True))
        return cut

    def _submit(self, utterance_id: str | None, **payload) -> str:
        if self._queue.full():
            raise ControlError("busy", f"{self._queue.maxsize} requests are already waiting; slow down")
        uid = utterance_id or f"utt_{next(self._ids)}"
        self._queue.put_nowait(_Request(self._generation, uid, **payload))
        return uid

    def _add_draft(self, samples: np.ndarray) -> None:
        if samples.size:
            self._draft.append(samples)
            self._draft_samples += samples.size

    def _flush_resampler(self) -> None:
        if self._resampler is not None:
            self._add_draft(self._resampler[1].flush())
            self._resampler = None

    # ---- the ordered worker ---------------------------------------------------------------

    async def run(self) -> None:
        while True:
            request = await self._queue.get()
            if request.generation != self._generation:
                continue
            try:
                samples = request.samples
                if samples is None:
                    samples = await self._synthesize(request)
                if request.generation == self._generation:
                    self._enqueue(request.utterance_id, samples)
            except ControlError as exc:
                self._emit(ErrorEvent(code=exc.code, message=f"{request.utterance_id}: {exc.message}"))

    async def _synthesize(self, request: _Request) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            samples = await tts.synthesize(request.text or "", self.sample_rate, request.voice or self.voice)
        except tts.TTSError as exc:
            raise ControlError("tts_failed", str(exc)) from exc
        self._metrics.tts_seconds.observe(time.perf_counter() - t0)
        return samples

    def _enqueue(self, uid: str, samples: np.ndarray) -> None:
        try:
            self.speech.append(Utterance(uid, samples), extra_pending=self._draft_samples)
        except BacklogFull as exc:
            raise ControlError("audio_backlog", f"speech backlog is full ({exc}); wait or interrupt") from exc
        except ValueError as exc:
            raise ControlError("empty_utterance", str(exc)) from exc
        duration = samples.size / self.sample_rate
        self._metrics.speech_seconds.inc(duration)
        self._emit(UtteranceQueued(utterance_id=uid, duration_s=round(duration, 3)))
