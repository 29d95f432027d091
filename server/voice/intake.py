"""Agent speech intake: text (via TTS) and pushed PCM become utterances, in the order sent.

Every request takes its place in the speech queue the moment it arrives: ``speak`` reserves
an open utterance that a synthesis task fills sentence by sentence, ``audio.append`` opens
(or extends) a streamed utterance that plays as it arrives, faster or slower than real
time, until ``audio.commit`` closes it. So an ``audio.commit`` sent after a ``speak`` is
never played before it, and the first sentence of a long text plays while the rest is
being synthesised. ``interrupt`` bumps a generation counter, so syntheses in flight from
before it stop rather than play. A synthesis that fails, however, fails its own utterance (an
``error`` event, ``tts_failed``, naming it): the worker goes on to the next.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from server.base.errors import ControlError
from server.base.metrics import ServerMetrics
from server.base.protocol import ErrorEvent, PlaybackFinished, ServerEvent, UtteranceQueued
from server.media.audio import Resampler
from server.voice import tts
from server.voice.speech import BacklogFull, SpeechQueue, TooManyUtterances, Utterance

log = logging.getLogger(__name__)
INTAKE_QUEUE = 16
# Containers sent where raw PCM16 is expected: refused with a hint instead of played as noise.
_CONTAINER_MAGIC = {b"RIFF": "WAV", b"OggS": "Ogg", b"fLaC": "FLAC", b"ID3\x03": "MP3", b"ID3\x04": "MP3"}


@dataclass(frozen=True)
class _Job:
    generation: int
    utterance: Utterance
    text: str
    voice: str | None


class SpeechIntake:
    def __init__(
        self,
        speech: SpeechQueue,
        sample_rate: int,
        max_text_chars: int,
        voice: str | None,
        emit: Callable[[ServerEvent], None],
        metrics: ServerMetrics,
        backend: tts.TTSBackend | None = None,
        on_rename: Callable[[str, str], None] | None = None,
    ) -> None:
        self.speech = speech
        self.sample_rate = sample_rate
        self.max_text_chars = max_text_chars
        self.voice = voice
        self.backend = backend or tts.NoSpeech()
        self._emit = emit
        self._metrics = metrics
        self._on_rename = on_rename
        self._jobs: asyncio.Queue[_Job] = asyncio.Queue(INTAKE_QUEUE)
        self._generation = 0
        self._ids = itertools.count(1)
        self._streaming: Utterance | None = None  # the open utterance audio.append feeds
        self._auto_named = False
        self._resampler: tuple[int, Resampler] | None = None

    @property
    def pending_samples(self) -> int:
        """Speech held for this session and not yet fed."""
        return self.speech.pending_samples

    # ---- requests (called from the control socket's reader) ----------------------------

    def speak(self, text: str, utterance_id: str | None, voice: str | None) -> str:
        if len(text) > self.max_text_chars:
            raise ControlError("text_too_long", f"text is {len(text)} characters; the limit is {self.max_text_chars}")
        if not tts.split_sentences(text):
            raise ControlError("empty_text", "text has nothing to say")
        if self.speech.pending_samples >= self.speech.max_samples:
            raise ControlError("audio_backlog", "speech backlog is full; wait for playback or send interrupt")
        if self._jobs.full():
            raise ControlError("busy", f"{self._jobs.maxsize} texts are already waiting for synthesis; slow down")
        self._close_streaming()
        uid = utterance_id or self._new_id()
        utterance = self._open(uid)
        self._jobs.put_nowait(_Job(self._generation, utterance, text, voice or self.voice))
        return uid

    def append(self, pcm: bytes, sample_rate: int, utterance_id: str | None = None) -> str:
        """Add pushed PCM16 to the streamed utterance (opening one if needed); it plays as it arrives."""
        _check_pcm(pcm)
        incoming = len(pcm) // 2 * self.sample_rate // sample_rate
        if self.pending_samples + incoming > self.speech.max_samples:
            raise ControlError(
                "audio_backlog",
                f"pushed audio would exceed the "
                f"{self.speech.max_samples / self.sample_rate:.0f} s backlog; "
                f"wait for playback or send interrupt",
            )
        current = self._streaming
        if current is not None and utterance_id is not None and utterance_id != current.id:
            self._close_streaming()
        if self._streaming is None:
            self._auto_named = utterance_id is None
            self._streaming = self._open(utterance_id or self._new_id())
        if self._resampler is None or self._resampler[0] != sample_rate:
            self._flush_resampler()
            self._resampler = (sample_rate, Resampler(self.sample_rate))
        self._extend(self._resampler[1].push_pcm16(pcm, sample_rate))
        return self._streaming.id

    def commit(self, utterance_id: str | None) -> str:
        """Close the streamed utterance; an id given here names one whose appends carried none."""
        utterance = self._streaming
        if utterance is None:
            raise ControlError("empty_commit", "audio.commit with no audio appended since the last commit")
        if utterance_id is not None and utterance_id != utterance.id:
            if not self._auto_named:
                self._close_streaming()
                raise ControlError(
                    "utterance_mismatch",
                    f"audio.commit names {utterance_id!r} but the audio was appended as {utterance.id!r}; "
                    f"{utterance.id!r} is committed",
                )
            if self._on_rename is not None:
                self._on_rename(utterance.id, utterance_id)
            utterance.id = utterance_id
        uid = utterance.id
        if not self._close_streaming():
            raise ControlError("empty_commit", "audio.commit with no audio appended since the last commit")
        return uid

    def interrupt(self) -> Utterance | None:
        """Drop everything not yet fed; returns the utterance cut mid-way (if any) for the caller to close."""
        self._generation += 1
        while not self._jobs.empty():
            self._jobs.get_nowait()
        self._streaming, self._resampler = None, None
        cut, unstarted = self.speech.clear()
        for utt in unstarted:
            self._emit(PlaybackFinished(utterance_id=utt.id, pts=None, interrupted=True))
        return cut

    def _open(self, utterance_id: str) -> Utterance:
        try:
            return self.speech.open(utterance_id)
        except TooManyUtterances as exc:
            raise ControlError("too_many_utterances", f"{exc}; wait for playback or send interrupt") from None

    def _new_id(self) -> str:
        return f"utt_{next(self._ids)}"

    def _extend(self, samples: np.ndarray) -> None:
        if samples.size and self._streaming is not None:
            try:
                self.speech.extend(self._streaming, samples)
            except BacklogFull as exc:
                raise ControlError("audio_backlog", f"speech backlog is full ({exc}); wait or interrupt") from exc

    def _flush_resampler(self) -> None:
        if self._resampler is not None:
            resampler = self._resampler[1]
            self._resampler = None
            self._extend(resampler.flush())

    def _close_streaming(self) -> bool:
        """Close the streamed utterance (if any): True if it had audio (and was announced)."""
        utterance = self._streaming
        if utterance is None:
            return False
        try:
            self._flush_resampler()
        finally:
            self._streaming = None
        return self._close(utterance)

    def _close(self, utterance: Utterance) -> bool:
        if not self.speech.close(utterance):
            return False
        duration = utterance.appended / self.sample_rate
        self._metrics.speech_seconds.inc(duration)
        self._emit(UtteranceQueued(utterance_id=utterance.id, duration_s=round(duration, 3)))
        return True

    # ---- the synthesis worker --------------------------------------------------------------

    async def run(self) -> None:
        """Synthesise queued texts in order, each sentence appended to its utterance as soon as it is ready."""
        while True:
            job = await self._jobs.get()
            if job.generation != self._generation:
                continue
            try:
                await self._synthesize(job)
            except ControlError as exc:
                self._emit(ErrorEvent(code=exc.code, message=f"{job.utterance.id}: {exc.message}",
                                      utterance_id=job.utterance.id))
            except Exception as exc:  # the backend failed on this text: this utterance fails, the voice speaks on
                log.warning("synthesis of utterance %s failed", job.utterance.id, exc_info=True)
                self._emit(ErrorEvent(code="tts_failed", utterance_id=job.utterance.id,
                                      message=f"{job.utterance.id}: synthesis failed ({exc.__class__.__name__})"))
            finally:
                if job.generation == self._generation:
                    self._close(job.utterance)

    async def _synthesize(self, job: _Job) -> None:
        t0 = time.perf_counter()
        sentences = tts.stream(self.backend, job.text, job.voice)
        try:
            async for samples in sentences:
                if job.generation != self._generation:
                    return
                try:
                    self.speech.extend(job.utterance, samples)
                except BacklogFull as exc:
                    raise ControlError("audio_backlog", f"speech backlog is full ({exc}); wait or interrupt") from exc
                self._metrics.tts_seconds.observe(time.perf_counter() - t0)
                t0 = time.perf_counter()
        except tts.TTSUnavailable as exc:
            raise ControlError("tts_unavailable", str(exc)) from exc
        except tts.TTSError as exc:
            raise ControlError("tts_failed", str(exc)) from exc
        finally:
            await sentences.aclose()


def _check_pcm(pcm: bytes) -> None:
    if len(pcm) % 2:
        raise ControlError("bad_audio", "PCM16 audio must have an even number of bytes")
    for magic, kind in _CONTAINER_MAGIC.items():
        if pcm.startswith(magic):
            raise ControlError("bad_audio", f"this looks like a {kind} file; send raw PCM16 little-endian mono")
