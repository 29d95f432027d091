"""Offline speech for training data, with the phones it says and when: espeak-ng voices (their
own phone timings), Piper's ``joe`` and flite's voices (built from recordings of real speakers;
phones by forced alignment), on generated sentences, with pauses, microphone-like perturbations
(``engine.train.augment``) and light distractors (noise, tones)."""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from engine.media import piper
from engine.media.espeak import Speech, read_wav, resample
from engine.media.espeak import speak as espeak
from engine.puppet.visemes import Phone
from engine.train.align import SAMPLE_RATE as ALIGN_RATE
from engine.train.align import AlignmentError, align

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
    "en-029", "en-us+f5", "en+m5", "en-us+m4", "en+m8", "en-us+klatt", "en+klatt4", "en-gb-x-rp+f3",
    "en-us+whisper",
)
HELD_OUT_VOICES = ("en-us+f1", "en+m1", "en-gb-x-gbclan")
FLITE_VOICES = ("awb", "rms", "kal16")  # flite's slt is held out
HELD_OUT_FLITE_VOICES = ("slt",)
PIPER_SHARE = 0.25  # of sentences spoken by Piper when it is installed
FLITE_SHARE = 0.25  # of sentences spoken by flite when it is installed


def sentence(rng: np.random.Generator, words: int | None = None) -> str:
    n = words or int(rng.integers(4, 14))
    text = " ".join(rng.choice(WORDS, size=n))
    return text[0].upper() + text[1:] + rng.choice([".", "?", "!", ","])


def aligned(pcm: np.ndarray, src_rate: int, text: str, sample_rate: int) -> Speech:
    """A natural voice's speech, its phones found by forced alignment to ``text``."""
    return Speech(resample(pcm, src_rate, sample_rate), align(resample(pcm, src_rate, ALIGN_RATE), text), sample_rate)


@functools.cache
def piper_voice():
    """The bundled Piper voice (``joe``), loaded once; None when Piper is not installed."""
    voices = piper.installed_voices() if piper.available() else {}
    return piper.load_voice(voices["joe"]) if "joe" in voices else None


def flite_available() -> bool:
    return shutil.which("flite") is not None


def flite(text: str, voice: str, sample_rate: int = 16000, stretch: float = 1.0) -> Speech:
    """``text`` in a flite voice (Debian ``flite``), aligned to its text; ``stretch`` > 1 speaks slower."""
    with tempfile.TemporaryDirectory(prefix="avatar-flite-") as tmp:
        path = Path(tmp) / "speech.wav"
        subprocess.run(["flite", "-voice", voice, "--setf", f"duration_stretch={stretch:.3f}", "-t", text,
                        "-o", str(path)], capture_output=True, check=True)
        samples, src_rate = read_wav(path.read_bytes())
    return aligned(samples.astype(np.float32) / 32768.0, src_rate, text, sample_rate)


def speak(rng: np.random.Generator, sample_rate: int, voices: tuple[str, ...],
          flite_voices: tuple[str, ...] = FLITE_VOICES) -> Speech:
    """One generated sentence in a random voice, rate and pitch; a natural voice whose alignment
    fails says it again in espeak-ng."""
    text = sentence(rng)
    pick, voice = rng.random(), str(rng.choice(voices))
    rate, pitch, length = int(rng.integers(120, 230)), int(rng.integers(20, 80)), rng.uniform(0.75, 1.4)
    try:
        if pick < PIPER_SHARE and piper_voice() is not None:
            pcm, src_rate = piper.synthesize(piper_voice(), text, length_scale=length, deterministic=True)
            return aligned(pcm, src_rate, text, sample_rate)
        if pick < PIPER_SHARE + FLITE_SHARE and flite_voices and flite_available():
            return flite(text, str(rng.choice(flite_voices)), sample_rate, length)
    except AlignmentError:
        pass
    return espeak(text, voice, rate, pitch, sample_rate)


def utterance(rng: np.random.Generator, sample_rate: int = 16000, voices: tuple[str, ...] = VOICES,
              seconds: float = 8.0, flite_voices: tuple[str, ...] = FLITE_VOICES) -> Speech:
    """About ``seconds`` of speech with pauses, level changes, a microphone's perturbations and
    occasional distractors."""
    from engine.train.augment import perturb

    parts: list[np.ndarray] = []
    phones: list[Phone] = []
    total = 0
    target = int(seconds * sample_rate)
    while total < target:
        gap = np.zeros(int(rng.uniform(0.05, 1.2) * sample_rate), dtype=np.float32)
        said = perturb(rng, speak(rng, sample_rate, voices, flite_voices))
        offset = (total + gap.size) / sample_rate
        phones += [Phone(p.name, p.start + offset, p.end + offset) for p in said.phones]
        parts += [gap, said.pcm * rng.uniform(0.4, 1.2)]
        total += gap.size + said.pcm.size
    pcm = np.concatenate(parts)[:target]
    if rng.random() < 0.3:
        pcm += rng.uniform(0.002, 0.02) * rng.standard_normal(pcm.size).astype(np.float32)
    if rng.random() < 0.15:
        t = np.arange(pcm.size) / sample_rate
        pcm += 0.03 * np.sin(2 * np.pi * rng.uniform(200, 900) * t).astype(np.float32)
    end = pcm.size / sample_rate
    return Speech(np.clip(pcm, -1, 1).astype(np.float32), [p for p in phones if p.start < end], sample_rate)
