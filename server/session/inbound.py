"""A session's audio-in pipeline: what drives the avatar.

The microphone (a browser's, or a WHIP publisher's) and the agent's speech (text through the
TTS, or pushed PCM) come in; the feed clock takes them on in real time (the user's voice in
mirror mode, the agent's in agent mode, silence otherwise) and the feed loop hands each block
to the engine's input. In agent mode the microphone feeds only voice activity detection.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from server.base.engine_port import EngineInput
from server.base.local_engine import VoiceActivity, no_voice_activity
from server.base.metrics import ServerMetrics
from server.base.protocol import Mode, ServerEvent, SessionCreate
from server.config import Settings
from server.media.microphone import MicrophoneIntake, SampleFifo
from server.session.feed_loop import FeedLoop
from server.session.feeder import Feeder
from server.voice.agent import AgentVoice
from server.voice.speech import SpeechQueue
from server.voice.tts import TTSBackend


class Inbound:
    """Microphone intake -> mirror FIFO | agent voice -> feed clock -> feed loop -> the engine's input.

    ``microphone.samples`` counts what was heard; ``feeder.fed`` what the engine was given."""

    def __init__(
        self,
        session_id: str,
        options: SessionCreate,
        settings: Settings,
        link: EngineInput,
        generated_samples: Callable[[], int],
        metrics: ServerMetrics,
        emit: Callable[[ServerEvent], None],
        on_heard: Callable[[np.ndarray], None],
        on_fed: Callable[[float, int, np.ndarray], None],
        tts: TTSBackend | None = None,
        vad_model: Callable[[], VoiceActivity] = no_voice_activity,
    ) -> None:
        sr, fps = link.info.sample_rate, link.info.fps
        feed, voice = settings.feed, settings.speech
        self._link = link
        speech = SpeechQueue(int(voice.max_audio_backlog_s * sr), voice.max_queued_utterances)
        self.mic = SampleFifo(int(feed.mic_buffer_s * sr))
        self.feeder = Feeder(
            sr,
            speech,
            self.mic,
            feed.feed_holdback_s,
            int(feed.max_engine_backlog_s * sr),
            options.mode or settings.session.default_mode,
            int(feed.agent_engine_backlog_s * sr),
            link.lookahead_samples,
        )
        self.voice = AgentVoice(
            speech,
            self.feeder,
            sr,
            fps,
            settings.limits.max_text_chars,
            voice.vad_config(),
            vad_model,
            options.voice or voice.voice,
            voice.barge_in if options.barge_in is None else options.barge_in,
            voice.user_audio if options.user_audio is None else options.user_audio,
            emit,
            metrics,
            tts,
        )
        self.voice.on_cut = link.silence_from  # an interrupt silences the engine's audio from the cut on
        self._on_heard = on_heard
        self.microphone = MicrophoneIntake(sr, metrics, self._heard)
        self.feed_loop = FeedLoop(
            session_id, self.feeder, link, generated_samples, self.voice.tracker, emit, feed.feed_tick_s, on_fed
        )

    @property
    def mode(self) -> Mode:
        return self.feeder.mode

    def prefill(self) -> None:
        """Silence for the engine's first chunk, fed at once (ahead of real time): the engine computes
        it before the peer connects."""
        silence = self.feeder.prefill(self._link.first_chunk_samples)
        self._link.feed(silence.start, silence.samples)

    def _heard(self, samples: np.ndarray) -> None:
        self._on_heard(samples)
        if self.feeder.mode == "mirror":
            self.feeder.hear_mic(samples, time.monotonic())
        else:
            self.voice.hear_user(samples, self.microphone.samples)

    def configure(
        self, mode: Mode | None, voice: str | None, barge_in: bool | None = None, user_audio: bool | None = None
    ) -> None:
        self.voice.configure(voice, barge_in, user_audio)
        if mode is not None and mode != self.feeder.mode:
            if mode == "mirror":
                self.voice.interrupt()
            self.mic.clear()
            self.voice.barge_in.reset()
            self.feeder.mode = mode
