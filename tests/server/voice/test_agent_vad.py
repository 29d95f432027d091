"""Barge-in: voice activity on the user's microphone (silero VAD) in agent mode, as events with media
timestamps and the segment's PCM, and interrupting the avatar when enabled."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import torch
from agent_helpers import LEAD_S, append_message, live_session, tone, user_wav
from server_helpers import SpeechTrack, loopback_only, make_settings, running_server

from server.api.local_adapter import SileroActivity
from server.media.audio import pcm16_to_float
from server.voice.vad import SpeechDetector, SpeechStarted, SpeechStopped

SR = 16000


def run_detector(pcm: np.ndarray, rate: int) -> list:
    detector = SpeechDetector(rate, SileroActivity())
    step = rate // 50
    events = []
    for i in range(0, pcm.size, step):
        events += detector.push(pcm16_to_float(pcm[i : i + step]))
    return events


@pytest.mark.parametrize("rate", [16_000, 48_000])
def test_detector_finds_speech_after_silence(rate):
    threads = torch.get_num_threads()
    pcm, speech_s = user_wav(rate)
    events = run_detector(pcm, rate)
    assert torch.get_num_threads() == threads  # the silero package's import side effect is avoided
    assert [type(e) for e in events] == [SpeechStarted, SpeechStopped]
    start, stop = events
    assert start.start / rate == pytest.approx(LEAD_S, abs=0.15)
    assert stop.start == start.start
    # espeak pads its speech with a little silence at the end; the segment ends on the last voiced part.
    assert LEAD_S + speech_s - 0.6 < stop.end / rate <= LEAD_S + speech_s + 0.1
    # The segment's audio is the speech (plus pre-roll), loud, at the input rate.
    assert stop.pcm.size == stop.end - stop.start + int(0.192 * rate)
    expected = pcm16_to_float(pcm[stop.start - int(0.192 * rate) : stop.end])
    assert np.allclose(stop.pcm, expected) and np.abs(stop.pcm).max() > 0.2


def test_detector_ignores_silence_noise_and_tones():
    rng = np.random.default_rng(0)
    noise = (rng.normal(0, 0.02, 5 * SR) * 32768).astype(np.int16)
    assert run_detector(np.zeros(5 * SR, np.int16), SR) == []
    assert run_detector(noise, SR) == []
    assert run_detector(tone(3.0, amplitude=0.3), SR) == []


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("barge_in", [True, False])
async def test_user_speech_interrupts_the_avatar(monkeypatch, barge_in):
    loopback_only(monkeypatch)
    pcm, speech_s = user_wav()
    settings = make_settings(user_audio=True)
    async with running_server(settings, config="micro") as srv, \
            live_session(srv, mic=SpeechTrack(pcm), barge_in=barge_in) as live:
        ev = live.events
        await ev.send(append_message(tone(12.0), SR, "answer"))
        await ev.send({"type": "audio.commit"})
        await ev.wait("playback.started", "answer")
        started = await ev.wait("user.speech_started", timeout_s=15)
        t_started = ev.at("user.speech_started")
        stopped = await ev.wait("user.speech_stopped", timeout_s=15)
        # Media timestamps on the microphone's stream: the speech began LEAD_S in.
        assert started["mic_time"] == pytest.approx(LEAD_S, abs=0.3)
        assert stopped["mic_time"] - started["mic_time"] == pytest.approx(stopped["duration_s"], abs=0.01)
        assert speech_s - 0.7 < stopped["duration_s"] < speech_s + 0.2
        assert stopped["pts"] >= started["pts"] > 0
        # The segment's PCM, for a recogniser: the user's speech, at the engine rate.
        audio = np.frombuffer(base64.b64decode(stopped["audio"]), "<i2")
        assert stopped["sample_rate"] == SR
        assert audio.size / SR == pytest.approx(stopped["duration_s"] + 0.192, abs=0.05)
        assert np.abs(audio).max() > 0.2 * 32768
        if barge_in:
            finished = await ev.wait("playback.finished", "answer", timeout_s=2)
            assert started["interrupting"] and finished["interrupted"]
            assert ev.at("playback.finished", "answer") - t_started < 0.2
            assert finished["pts"] == pytest.approx(started["pts"], abs=0.1)
        else:
            assert not started["interrupting"] and not ev.of("playback.finished", "answer")
        print(f"barge-in={barge_in}: speech at mic {started['mic_time']:.2f} s, "
              f"{stopped['duration_s']:.2f} s long; avatar at {started['pts']:.2f} s")
