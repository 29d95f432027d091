"""espeak-ng speaks at the engine's rate; a bad voice is an error; a missing program is unavailable."""

from __future__ import annotations

import numpy as np
import pytest

from engine.media import espeak
from server.voice import tts

SR = 16_000


async def test_espeak_tts_gives_speech_at_the_engine_rate():
    pcm = await tts.synthesize("Hello world.", SR, espeak)
    assert pcm.dtype == np.float32 and 0.5 < pcm.size / SR < 3 and np.abs(pcm).max() > 0.1
    with pytest.raises(tts.TTSError):
        await tts.synthesize("Hello", SR, espeak, voice="nonexistent")


class Missing:
    """An espeak-ng that is not installed."""

    def command(self, text: str, voice: str = "en-us") -> list[str]:
        return ["espeak-ng-not-installed", "--stdout", "-v", voice, "--", text]

    read_wav = staticmethod(espeak.read_wav)


async def test_espeak_missing_is_unavailable_not_a_crash():
    with pytest.raises(tts.TTSUnavailable, match="espeak-ng-not-installed is not installed"):
        await tts.synthesize("Hello", SR, Missing())
    with pytest.raises(tts.TTSUnavailable):
        tts.create_backend("espeak", SR)  # the voice layer has espeak-ng only as it is given it
    with pytest.raises(tts.TTSUnavailable):
        await tts.NoSpeech().synthesize("Hello")
