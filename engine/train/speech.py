"""Offline speech for training data: espeak-ng voices, rates and pitches and the Piper
``joe`` voice at several speeds (when installed), on generated sentences, with pauses and
light distractors (noise, tones)."""

from __future__ import annotations

import functools
import shutil
import subprocess

import numpy as np

from engine.media import piper

WORDS = (
    "the a an and but so we you they it this that there here now then today tomorrow always never "
    "really quite very maybe perhaps surely good bad big small warm cold bright dark quick slow happy "
    "quiet loud open closed early late simple hard easy new old great little long short best first "
    "go make take see look find give tell work call try ask need feel leave put mean keep let begin "
    "seem help talk turn start show hear play run move live believe bring write sit stand lose pay "
    "meet include continue set learn change lead understand watch follow stop create speak read "
    "time person year way day thing man world life hand part child eye woman place week case point "
    "number group problem fact water room mother area money story book word night morning music "
    "moon ocean river garden window kitchen table doctor teacher pilot market train station school "
    "coffee apple orange banana yellow purple silver golden zero seven eleven ninety oh wow hello"
).split()

VOICES = (
    "en-us", "en", "en-gb-x-rp", "en-us+f2", "en-us+f3", "en-us+m3", "en+f4", "en+m2", "en-gb-scotland",
    "en-029", "en-us+f5", "en+m5",
)
HELD_OUT_VOICES = ("en-us+f1", "en+m1", "en-gb-x-gbclan")


def require_espeak() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        raise RuntimeError("espeak-ng is not installed (Debian package espeak-ng)")
    return path


def sentence(rng: np.random.Generator, words: int | None = None) -> str:
    n = words or int(rng.integers(4, 14))
    text = " ".join(rng.choice(WORDS, size=n))
    return text[0].upper() + text[1:] + rng.choice([".", "?", "!", ","])


def espeak(text: str, voice: str, rate: int, pitch: int, sample_rate: int = 16000) -> np.ndarray:
    """Synthesize ``text``; espeak-ng writes 22.05 kHz s16 mono wav to stdout."""
    out = subprocess.run(
        [require_espeak(), "-v", voice, "-s", str(rate), "-p", str(pitch), "--stdout", text],
        capture_output=True, check=True,
    ).stdout
    pcm = np.frombuffer(out[44:], dtype=np.int16).astype(np.float32) / 32768.0
    return resample(pcm, int.from_bytes(out[24:28], "little"), sample_rate)


def resample(pcm: np.ndarray, src_rate: int, rate: int) -> np.ndarray:
    """Linear resampling: plenty for mel features of training speech."""
    if src_rate == rate or not pcm.size:
        return pcm.astype(np.float32)
    n = int(round(pcm.size * rate / src_rate))
    return np.interp(np.arange(n) * src_rate / rate, np.arange(pcm.size), pcm).astype(np.float32)


PIPER_SHARE = 0.3  # of sentences spoken by Piper when it is installed


@functools.cache
def piper_voice():
    """The bundled Piper voice (``joe``), loaded once; None when Piper is not installed."""
    voices = piper.installed_voices() if piper.available() else {}
    return piper.load_voice(voices["joe"]) if "joe" in voices else None


def speak(rng: np.random.Generator, sample_rate: int, voices: tuple[str, ...]) -> np.ndarray:
    """One generated sentence in a random voice, rate and pitch."""
    text = sentence(rng)
    use_piper, voice = rng.random() < PIPER_SHARE, str(rng.choice(voices))
    rate, pitch, length = int(rng.integers(120, 230)), int(rng.integers(20, 80)), rng.uniform(0.75, 1.4)
    if use_piper and piper_voice() is not None:
        pcm, src_rate = piper.synthesize(piper_voice(), text, length_scale=length, deterministic=True)
        return resample(pcm, src_rate, sample_rate)
    return espeak(text, voice, rate, pitch, sample_rate)


def utterance(rng: np.random.Generator, sample_rate: int = 16000, voices: tuple[str, ...] = VOICES,
              seconds: float = 8.0) -> np.ndarray:
    """About ``seconds`` of speech with pauses, level changes and occasional distractors."""
    parts: list[np.ndarray] = []
    total = 0
    target = int(seconds * sample_rate)
    while total < target:
        gap = np.zeros(int(rng.uniform(0.05, 1.2) * sample_rate), dtype=np.float32)
        speech = speak(rng, sample_rate, voices) * rng.uniform(0.4, 1.2)
        parts += [gap, speech]
        total += gap.size + speech.size
    pcm = np.concatenate(parts)[:target]
    if rng.random() < 0.3:
        pcm += rng.uniform(0.002, 0.02) * rng.standard_normal(pcm.size).astype(np.float32)
    if rng.random() < 0.15:
        t = np.arange(pcm.size) / sample_rate
        pcm += 0.03 * np.sin(2 * np.pi * rng.uniform(200, 900) * t).astype(np.float32)
    return np.clip(pcm, -1, 1).astype(np.float32)
