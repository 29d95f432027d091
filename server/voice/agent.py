"""The avatar's voice in agent mode: speech requests in the order sent, interrupt, barge-in."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import numpy as np

from server.base.errors import ControlError
from server.base.local_engine import VoiceActivity
from server.base.metrics import ServerMetrics
from server.base.protocol import Mode, ServerEvent
from server.voice.barge_in import BargeIn
from server.voice.intake import SpeechIntake
from server.voice.mute import VoiceGate
from server.voice.playback import PlaybackTracker
from server.voice.speech import SpeechQueue
from server.voice.tts import TTSBackend
from server.voice.vad import VadConfig


class FeedPosition(Protocol):
    """What the voice needs of the feed clock: the mode, and how much audio the engine has had."""

    mode: Mode
    fed: int

    def seal(self) -> None: ...  # nothing fed so far is fed again


class AgentVoice:
    """Owns the intake, the playback tracker, the voice gate and barge-in of one session."""

    def __init__(
        self,
        speech: SpeechQueue,
        feed: FeedPosition,
        sample_rate: int,
        fps: int,
        max_text_chars: int,
        vad: VadConfig | None,
        vad_model: Callable[[], VoiceActivity],
        voice: str | None,
        barge_in: bool,
        user_audio: bool,
        emit: Callable[[ServerEvent], None],
        metrics: ServerMetrics,
        tts: TTSBackend | None = None,
    ) -> None:
        self.speech = speech
        self._feed = feed
        self._emit = emit
        self.tracker = PlaybackTracker(sample_rate, fps)
        self.gate = VoiceGate(sample_rate)
        self.intake = SpeechIntake(
            speech, sample_rate, max_text_chars, voice, emit, metrics, tts, self.tracker.rename
        )
        self.barge_in = BargeIn(
            sample_rate,
            vad,
            vad_model,
            barge_in,
            user_audio,
            emit,
            speaking=self.speaking,
            heard_until=lambda: self.gate.released_until,
            interrupt=self.interrupt,
        )
        self.interrupts: deque[tuple[float, int, int]] = deque(maxlen=16)  # (wall time, cut sample, fed)
        self.on_cut: Callable[[int], None] = lambda _: None  # the engine is told where the voice was cut

    async def run(self) -> None:
        """The synthesis worker; runs for the session's life."""
        await self.intake.run()

    def speaking(self) -> bool:
        """An utterance is queued, or fed and not yet finished playing."""
        return bool(self.tracker.active or len(self.speech))

    def speak(self, text: str, utterance_id: str | None, voice: str | None) -> str:
        self._require_agent()
        return self.intake.speak(text, utterance_id, voice)

    def append_audio(self, pcm: bytes, sample_rate: int, utterance_id: str | None = None) -> str:
        self._require_agent()
        return self.intake.append(pcm, sample_rate, utterance_id)

    def commit_audio(self, utterance_id: str | None) -> str:
        self._require_agent()
        return self.intake.commit(utterance_id)

    def hear_user(self, samples: np.ndarray, stream_end: int) -> None:
        self.barge_in.push(samples, stream_end)

    def interrupt(self) -> int:
        """Stop the avatar's voice now: drop what is queued, silence what was fed but not yet heard.

        The cut is the media sample of the next audio packet to be released, so the voice stops
        within one packet (20 ms) of media time. Everything fed to the engine up to now (``fed``)
        belongs to speech being interrupted; the feed clock feeds silence from here on, so the
        face returns to listening once the frames already generated have played. Returns the cut.
        """
        self.intake.interrupt()
        cut = self.gate.released_until
        fed = self._feed.fed
        if self._feed.mode == "agent":  # in mirror mode the voice is the user's own: never muted
            self._feed.seal()
            self.gate.mute(cut, fed)
            self.on_cut(cut)
        for event in self.tracker.interrupt(cut):
            self._emit(event)
        self.interrupts.append((time.monotonic(), cut, fed))
        return cut

    def configure(self, voice: str | None, barge_in: bool | None, user_audio: bool | None) -> None:
        if voice is not None:
            self.intake.voice = voice
        if barge_in is not None:
            self.barge_in.enabled = barge_in
        if user_audio is not None:
            self.barge_in.user_audio = user_audio

    def _require_agent(self) -> None:
        if self._feed.mode != "agent":
            raise ControlError("wrong_mode", 'speech needs agent mode: send {"type": "config", "mode": "agent"}')
