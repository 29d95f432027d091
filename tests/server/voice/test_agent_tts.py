"""Built-in TTS: backends chosen by config, a clear error when one is missing, sentence streaming
(the first sentence is queued for playback before the rest is synthesised), and speak end to end."""

from __future__ import annotations

import asyncio
import importlib.util
import time

import numpy as np
import pytest
from agent_helpers import live_session
from server_helpers import loopback_only, make_settings, running_server, wait_until

from engine.media import espeak
from server import cli
from server.api.local_adapter import create_backend
from server.base.metrics import ServerMetrics
from server.base.protocol import ErrorEvent, UtteranceQueued
from server.config import Settings
from server.voice import tts
from server.voice.intake import SpeechIntake
from server.voice.speech import SpeechQueue

SR = 16000
TEXT = "Hello there. I am a talking avatar! Do you hear me? This is the fourth sentence, and the last one."


def test_text_is_split_into_sentences_and_long_ones_into_clauses():
    assert tts.split_sentences(TEXT) == [
        "Hello there.", "I am a talking avatar!", "Do you hear me?", "This is the fourth sentence, and the last one."]
    assert tts.split_sentences("One line\n\nanother   line") == ["One line", "another line"]
    assert tts.split_sentences("  \n\t ") == []
    # the first sentence's first clause goes alone, so the voice starts sooner
    assert tts.split_sentences("Hello there, I am the avatar. Yes, really.") == [
        "Hello there,", "I am the avatar.", "Yes, really."]
    long = ", ".join(f"clause number {i}" for i in range(40)) + "."
    pieces = tts.split_sentences(long)
    assert len(pieces) > 3 and all(len(p) <= tts.MAX_SENTENCE_CHARS for p in pieces)
    assert " ".join(pieces) == long


@pytest.mark.parametrize("backend", ["espeak", "piper"])
async def test_backends_speak_at_the_engine_rate(backend):
    voice = create_backend(backend, SR)
    t0 = time.perf_counter()
    pcm = await voice.synthesize("Hello, I am a talking avatar.")
    took = time.perf_counter() - t0
    seconds = pcm.size / SR
    assert pcm.dtype == np.float32 and 1.0 < seconds < 4.0 and np.abs(pcm).max() > 0.2
    # Speech, not noise: most of the energy is in short voiced stretches between quieter gaps.
    frames = pcm[: pcm.size // 320 * 320].reshape(-1, 320)
    rms = np.sqrt((frames**2).mean(axis=1))
    assert (rms > 0.05).mean() > 0.3 and (rms < 0.01).any()
    with pytest.raises(tts.TTSError):
        await voice.synthesize("Hello", "nonexistent")
    print(f"{backend}: {seconds:.2f} s of speech in {took:.2f} s")


def test_missing_backend_is_a_clear_error(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "piper" else real(name, *a))
    with pytest.raises(tts.TTSUnavailable, match="pip install piper-tts"):
        create_backend("piper", SR)
    with pytest.raises(tts.TTSUnavailable, match="no Piper voices"):
        tts.create_backend("piper", SR)  # the voice layer has Piper's voices only as it is given them
    with pytest.raises(tts.TTSUnavailable, match="unknown TTS backend"):
        create_backend("festival", SR)
    assert Settings.from_env({"AVATAR_TTS": "piper"}).speech.tts == "piper"
    # `avatar serve` refuses to start with a backend that is not there, in one line.
    assert cli.main(["serve", "--tts", "piper", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("avatar serve: TTS backend 'piper'") and "pip install piper-tts" in err[-1]


class GatedTTS:
    """A backend that says each sentence as a second of tone, holding sentences after the first until
    released, so a test can look at the queue while the rest is still being synthesised."""

    name = "gated"
    default_voice = "x"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls: list[str] = []
        self.returned = 0

    async def synthesize(self, text: str, voice: str | None = None) -> np.ndarray:
        self.calls.append(text)
        if len(self.calls) > 1:
            await self.release.wait()
        self.returned += 1
        return np.full(SR, 0.25, np.float32)


async def test_first_sentence_is_queued_before_the_rest_is_synthesised():
    events = []
    speech = SpeechQueue(60 * SR, 64)
    backend = GatedTTS()
    intake = SpeechIntake(speech, SR, 2000, None, events.append, ServerMetrics(), backend)
    worker = asyncio.create_task(intake.run())
    try:
        assert intake.speak(TEXT, "u1", None) == "u1"
        assert await wait_until(lambda: len(backend.calls) == 2, 5)
        assert backend.calls == ["Hello there.", "I am a talking avatar!"]  # sentence 2 is still synthesising
        block, segments = speech.take(2 * SR)
        assert block.size == SR and block.min() == 0.25  # sentence 1 can play now
        assert [(s.utterance_id, s.first, s.last) for s in segments] == [("u1", True, False)]
        assert speech.take(SR)[0].size == 0  # the open utterance keeps its place: nothing skips ahead
        backend.release.set()
        assert await wait_until(lambda: events, 5)
        assert len(backend.calls) == 4
        assert events == [UtteranceQueued(utterance_id="u1", duration_s=4.0)]
        block, segments = speech.take(10 * SR)
        assert block.size == 3 * SR and segments[-1].last

        # An interrupt stops a synthesis in flight: nothing more is appended.
        backend.calls.clear()
        backend.release.clear()
        backend.returned = 0
        intake.speak(TEXT, "u2", None)
        assert await wait_until(lambda: len(backend.calls) == 2, 5)
        intake.interrupt()
        backend.release.set()
        assert await wait_until(lambda: backend.returned == 2, 5)  # the sentence in flight came back, unused
        assert speech.pending_samples == 0 and len(speech) == 0 and len(backend.calls) == 2
        # A synthesis failure is an error event naming the utterance.
        intake.speak("Hello.", "u3", "nonexistent")
        intake.backend = tts.EspeakTTS(SR, espeak)
        assert await wait_until(lambda: isinstance(events[-1], ErrorEvent), 10)
        error = events[-1]
        assert isinstance(error, ErrorEvent) and error.code == "tts_failed" and error.utterance_id == "u3"
    finally:
        worker.cancel()


@pytest.mark.usefixtures("one_thread")
async def test_piper_speak_end_to_end(monkeypatch):
    """A long text through Piper: the avatar starts speaking after the first sentence is synthesised."""
    loopback_only(monkeypatch)
    async with running_server(make_settings(tts="piper"), config="micro") as srv, live_session(srv) as live:
        ev = live.events
        text = " ".join([TEXT] * 4)
        t_speak = time.monotonic()
        await ev.send({"type": "speak", "text": text, "utterance_id": "long"})
        started = await ev.wait("playback.started", "long")
        t_started = ev.at("playback.started", "long")
        queued = await ev.wait("utterance.queued", "long", timeout_s=30)
        latency = t_started - t_speak
        assert queued["duration_s"] > 12  # sixteen sentences
        assert started["pts"] > 0 and latency < 3.0
        await ev.send({"type": "interrupt"})
        finished = await ev.wait("playback.finished", "long")
        assert finished["interrupted"] and not ev.of("error")
        print(f"piper: speak -> playback.started {latency * 1000:.0f} ms for {queued['duration_s']:.1f} s of speech")
