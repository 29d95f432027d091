"""Built-in text-to-speech: Debian ``espeak-ng``, offline, ~50x faster than real time.

Runs as a subprocess (never blocks the event loop) and returns float32 mono at the
engine's rate. espeak-ng's ``--stdout`` wav has placeholder sizes in its header (it is
written as a stream), so the data chunk is read to the end rather than trusted.
"""

from __future__ import annotations

import asyncio
import io
import shutil
import wave

import numpy as np

from server.audio import resample_pcm16

ESPEAK = "espeak-ng"


class TTSError(RuntimeError):
    pass


def available() -> bool:
    return shutil.which(ESPEAK) is not None


async def synthesize(
    text: str, sample_rate: int, voice: str = "en-us", timeout_s: float = 30.0
) -> np.ndarray:
    """Speak ``text`` with espeak-ng; float32 mono at ``sample_rate``."""
    try:
        proc = await asyncio.create_subprocess_exec(
            ESPEAK,
            "--stdout",
            "-v",
            voice,
            "--",
            text,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError as exc:
        raise TTSError(f"{ESPEAK} is not installed") from exc
    try:
        wav, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError as exc:
        proc.kill()
        await proc.wait()
        raise TTSError(f"{ESPEAK} took longer than {timeout_s:.0f} s") from exc
    if proc.returncode != 0 or not wav:
        raise TTSError(f"{ESPEAK} failed: {err.decode(errors='replace').strip() or proc.returncode}")
    rate, pcm = _read_wav(wav)
    return resample_pcm16(pcm, rate, sample_rate)


def _read_wav(data: bytes) -> tuple[int, np.ndarray]:
    with wave.open(io.BytesIO(data)) as w:
        if w.getsampwidth() != 2:
            raise TTSError(f"unexpected sample width {w.getsampwidth()}")
        rate, channels = w.getframerate(), w.getnchannels()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    if channels > 1:
        pcm = pcm[: pcm.size // channels * channels].reshape(-1, channels).mean(axis=1).astype(np.int16)
    return rate, pcm
