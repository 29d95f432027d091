"""Agent mode: the user's voice activity becomes ``user.speech_*`` events and, with barge-in on,
interrupts the avatar while it speaks."""

from __future__ import annotations

import base64
from collections.abc import Callable

import numpy as np

from server.base.local_engine import VoiceActivity
from server.base.protocol import ErrorEvent, ServerEvent, UserSpeechStarted, UserSpeechStopped
from server.media.audio import float_to_pcm16
from server.voice.vad import SpeechDetector, SpeechStarted, VadConfig, VadUnavailable


class BargeIn:
    """Runs the VAD on the microphone (``model`` made at its first samples; ``config`` None: VAD off)."""

    def __init__(
        self,
        sample_rate: int,
        config: VadConfig | None,
        model: Callable[[], VoiceActivity],
        enabled: bool,
        user_audio: bool,
        emit: Callable[[ServerEvent], None],
        speaking: Callable[[], bool],
        heard_until: Callable[[], int],
        interrupt: Callable[[], object],
    ) -> None:
        self.sample_rate = sample_rate
        self.enabled = enabled  # user speech interrupts the avatar
        self.user_audio = user_audio  # user.speech_stopped carries the segment's PCM
        self._config = config
        self._model = model
        self._emit = emit
        self._speaking = speaking
        self._heard_until = heard_until
        self._interrupt = interrupt
        self._detector: SpeechDetector | None = None
        self._origin = 0  # microphone sample where the detector's stream began
        self._failed = False

    def reset(self) -> None:
        """Forget the detector's stream (a mode change): the next samples start a new one."""
        self._detector = None

    def push(self, samples: np.ndarray, stream_end: int) -> None:
        """Microphone samples ending at stream sample ``stream_end``."""
        if not samples.size:
            return
        detector = self._detector or self._start(stream_end - samples.size)
        if detector is None:
            return
        sr = self.sample_rate
        for event in detector.push(samples):
            pts = round(self._heard_until() / sr, 3)
            mic_time = round((self._origin + event.start) / sr, 3)
            if isinstance(event, SpeechStarted):
                interrupting = self.enabled and self._speaking()
                self._emit(UserSpeechStarted(mic_time=mic_time, pts=pts, interrupting=interrupting))
                if interrupting:
                    self._interrupt()
            else:
                audio = None
                if self.user_audio:
                    audio = base64.b64encode(float_to_pcm16(event.pcm).tobytes()).decode()
                self._emit(
                    UserSpeechStopped(
                        mic_time=round((self._origin + event.end) / sr, 3),
                        duration_s=round((event.end - event.start) / sr, 3),
                        pts=pts,
                        sample_rate=sr,
                        audio=audio,
                    )
                )

    def _start(self, origin: int) -> SpeechDetector | None:
        if self._config is None or self._failed:
            return None
        try:
            self._detector = SpeechDetector(self.sample_rate, self._model(), self._config)
        except VadUnavailable as exc:
            self._failed = True
            self._emit(ErrorEvent(code="vad_unavailable", message=str(exc)))
            return None
        self._origin = origin
        return self._detector
