"""espeak-ng speaks at the engine's rate; a bad voice is an error."""

from __future__ import annotations

import numpy as np
import pytest

from server.voice import tts

SR = 16_000


async def test_espeak_tts_gives_speech_at_the_engine_rate():
    pcm = await tts.synthesize("Hello world.", SR)
    assert pcm.dtype == np.float32 and 0.5 < pcm.size / SR < 3 and np.abs(pcm).max() > 0.1
    with pytest.raises(tts.TTSError):
        await tts.synthesize("Hello", SR, voice="nonexistent")
