"""The engine's espeak-ng: speech of plausible length and level at the rate it says, phones in
order inside it, synthesis in a forked child that never collects garbage, the same samples for the
same text, and WAV read with ``wave`` (a streamed header's placeholder sizes included)."""

from __future__ import annotations

import ctypes
import gc
import io
import os
import shutil
import wave

import numpy as np
import pytest

from engine.media.espeak import Speech, command, forked, read_wav, resample, speak, synthesize

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
TEXT = "Please remember to water the ferns on Tuesday."  # 8 words


def _wav(samples: np.ndarray, rate: int, channels: int = 1) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return out.getvalue()


def test_read_wav_gives_the_samples_and_rate_and_averages_channels() -> None:
    ramp = np.arange(-1000, 1000, 7, dtype=np.int16)
    samples, rate = read_wav(_wav(ramp, 22050))
    assert rate == 22050 and samples.dtype == np.int16 and np.array_equal(samples, ramp)
    stereo = np.stack([ramp, ramp // 2], axis=1).reshape(-1)
    mixed, rate = read_wav(_wav(stereo, 8000, channels=2))
    assert rate == 8000 and mixed.size == ramp.size
    assert np.allclose(mixed, (ramp.astype(np.float64) + ramp // 2) / 2, atol=1)


def test_read_wav_reads_a_streamed_header_to_the_end_of_its_data() -> None:
    """espeak-ng --stdout writes 0x7ffff0xx as the RIFF and data sizes: the data that is there counts."""
    ramp = np.arange(0, 3000, dtype=np.int16)
    data = bytearray(_wav(ramp, 22050))
    data[4:8] = (0x7FFFF024).to_bytes(4, "little")
    data[40:44] = (0x7FFFF000).to_bytes(4, "little")
    samples, rate = read_wav(bytes(data))
    assert rate == 22050 and np.array_equal(samples, ramp)


def test_read_wav_refuses_other_sample_widths() -> None:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(8000)
        w.writeframes(bytes(100))
    with pytest.raises(ValueError, match="16-bit"):
        read_wav(out.getvalue())


def test_the_command_line_names_voice_rate_and_pitch_and_ends_options_before_the_text() -> None:
    assert command("-x hi", "en-gb", 150, 40) == ["espeak-ng", "--stdout", "-v", "en-gb", "-s", "150", "-p", "40",
                                                  "--", "-x hi"]
    assert command("hi") == ["espeak-ng", "--stdout", "-v", "en-us", "--", "hi"]


def test_resampling_keeps_duration_and_a_tone() -> None:
    t = np.arange(22050) / 22050
    tone = np.sin(2 * np.pi * 200 * t).astype(np.float32)
    down = resample(tone, 22050, 16000)
    assert down.dtype == np.float32 and down.size == 16000
    assert np.allclose(down, np.sin(2 * np.pi * 200 * np.arange(16000) / 16000), atol=0.01)
    assert resample(tone, 16000, 16000) is not tone and np.array_equal(resample(tone, 16000, 16000), tone)


@needs_espeak
def test_speak_gives_speech_of_plausible_length_at_the_rate_asked_with_phones_in_order() -> None:
    said = speak(TEXT, "en-us", 160, 50, sample_rate=16000)
    assert isinstance(said, Speech) and said.sample_rate == 16000 and said.pcm.dtype == np.float32
    assert 1.5 < said.seconds < 6.0  # 8 words at 160 wpm: 3 s
    assert np.abs(said.pcm).max() > 0.1 and np.sqrt(np.mean(said.pcm ** 2)) > 0.01
    phones = said.phones
    assert len(phones) >= 20
    assert all(p.end > p.start for p in phones)
    assert all(a.end <= b.start + 1e-9 for a, b in zip(phones, phones[1:], strict=False))
    assert phones[-1].end <= said.seconds + 1e-6
    spoken = [p.name for p in phones if p.name != "SIL"]
    assert spoken[:3] == ["P", "L", "IY"]  # "Please"
    assert said.pcm16().dtype == np.int16 and said.pcm16().size == said.pcm.size


@needs_espeak
def test_speak_at_its_own_rate_is_the_same_speech_and_repeats_exactly() -> None:
    native = speak("Hello there.", "en-us", 175, 50)
    again = speak("Hello there.", "en-us", 175, 50)
    assert native.sample_rate == 22050
    assert np.array_equal(native.pcm, again.pcm) and native.phones == again.phones
    slower = speak("Hello there.", "en-us", 100, 50)
    assert slower.seconds > 1.3 * native.seconds


@needs_espeak
def test_the_command_line_speaks_the_same_text_at_espeaks_rate() -> None:
    said = synthesize(TEXT, "en-us", 160)
    assert said.sample_rate == 22050 and said.phones == []
    assert 1.5 < said.seconds < 6.0 and np.abs(said.pcm).max() > 0.1
    with pytest.raises(RuntimeError, match="espeak-ng failed"):
        synthesize("hello", "nonexistent")


@needs_espeak
def test_a_noisy_voice_gives_the_same_samples_whatever_this_process_drew_before() -> None:
    """A whisper is noise from the C library's rand(): what the calling process drew from it before
    must not reach the speech (a forked synthesis would inherit that state)."""
    first = speak("ah", "en-us+whisper", 140, 50)
    libc = ctypes.CDLL(None)
    libc.srand(12345)
    for _ in range(17):
        libc.rand()
    again = speak("ah", "en-us+whisper", 140, 50)
    assert np.array_equal(first.pcm, again.pcm) and np.abs(first.pcm).max() > 0.01


def _child() -> tuple[int, bool]:
    return os.getpid(), gc.isenabled()


def test_a_forked_child_runs_without_the_collector_and_the_parent_keeps_it() -> None:
    assert gc.isenabled()
    pid, collecting = forked(_child)
    assert pid != os.getpid() and collecting is False
    assert gc.isenabled()
    gc.disable()
    try:
        forked(_child)
        assert not gc.isenabled(), "a parent's collector left off stays off"
    finally:
        gc.enable()
