"""Put the avatar at the end of a pipecat pipeline: its TTS audio and its interruptions go to an avatar session.

    avatar = await AvatarSession.create(url)
    pipeline = Pipeline([transport.input(), stt, context_aggregator.user(), llm, tts,
                         AvatarOutput(avatar), transport.output()])

Each TTS response (``TTSStartedFrame`` … ``TTSAudioRawFrame``… ``TTSStoppedFrame``) becomes one
streamed utterance, pushed as it is synthesised, so the avatar starts speaking with the first
audio frame; an ``InterruptionFrame`` (the user started talking) interrupts the avatar at once.
The TTS audio is not passed on by default (the avatar's WebRTC track carries the voice, lip-synced);
every other frame passes through unchanged. Needs the ``pipecat`` extra
(``pip install 'avatar-engine[pipecat]'``).
"""

from __future__ import annotations

import itertools
from typing import Protocol

import numpy as np
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from server.client import AvatarError


class AvatarSink(Protocol):
    """What the processor needs of :class:`server.client.AvatarSession`."""

    async def push_audio(self, pcm: bytes | np.ndarray, sample_rate: int, utterance_id: str | None = None) -> str: ...

    async def commit(self) -> str | None: ...

    async def interrupt(self) -> None: ...


class AvatarOutput(FrameProcessor):
    """Forwards TTS audio frames and interruptions to an avatar session."""

    def __init__(self, avatar: AvatarSink, *, pass_audio: bool = False, name: str | None = None) -> None:
        super().__init__(name=name)
        self.avatar = avatar
        self.pass_audio = pass_audio
        self._utterance: str | None = None
        self._ids = itertools.count(1)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        try:
            forward = await self._handle(frame)
        except AvatarError as exc:
            await self.push_error(ErrorFrame(error=f"avatar: {exc}"))
            forward = True
        if forward:
            await self.push_frame(frame, direction)

    async def _handle(self, frame: Frame) -> bool:
        """Act on ``frame``; False when it must not go further (TTS audio the avatar now plays)."""
        if isinstance(frame, TTSStartedFrame):
            await self._finish()
            self._utterance = f"tts_{frame.context_id or next(self._ids)}"
        elif isinstance(frame, TTSAudioRawFrame):
            if self._utterance is None:
                self._utterance = f"tts_{frame.context_id or next(self._ids)}"
            await self.avatar.push_audio(_mono(frame.audio, frame.num_channels), frame.sample_rate, self._utterance)
            return self.pass_audio
        elif isinstance(frame, TTSStoppedFrame):
            await self._finish()
        elif isinstance(frame, InterruptionFrame):
            self._utterance = None
            await self.avatar.interrupt()
        elif isinstance(frame, EndFrame | CancelFrame):
            await self._finish()
        return True

    async def _finish(self) -> None:
        if self._utterance is not None:
            self._utterance = None
            await self.avatar.commit()


def _mono(audio: bytes, channels: int) -> np.ndarray:
    samples = np.frombuffer(audio, "<i2")
    if channels <= 1:
        return samples
    return samples[: samples.size // channels * channels].reshape(-1, channels).mean(axis=1).astype(np.int16)
