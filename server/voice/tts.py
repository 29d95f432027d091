"""Built-in text-to-speech for ``speak``: Piper or Debian ``espeak-ng``, both offline.

The backend is chosen once per server (``AVATAR_TTS=piper|espeak``): Piper by default, a natural
voice that comes from wheels alone (no system package); espeak-ng has many more voices. Text is split into
sentences and each sentence is synthesised on its own, so the avatar starts speaking the
first sentence while the rest is still being synthesised: time to first sound depends on
the first sentence, not on the whole text.

espeak-ng runs as a subprocess (never blocks the event loop), its command line and its WAV read
by the engine's one espeak-ng wrapper (handed in as an ``EspeakProgram``). Piper runs an ONNX model
in a worker thread with one onnxruntime thread, so it never takes the engine's cores.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from server.base.local_engine import EspeakProgram, PiperVoices
from server.media.audio import float_to_pcm16, resample_pcm16

Backend = Literal["espeak", "piper"]
# Sentences longer than this are split again at commas, so a long first sentence still starts quickly.
MAX_SENTENCE_CHARS = 160
_SENTENCE_END = re.compile(r"(?<=[.!?…;:])[\"')\]]*\s+|\n\s*\n|\n(?=\s*[-*•])")
_CLAUSE_END = re.compile(r"(?<=,)\s+")


class TTSError(RuntimeError):
    """Synthesis failed (bad voice, backend crashed, timeout)."""


class TTSUnavailable(TTSError):
    """The configured backend is not installed on this machine."""


class TTSBackend(Protocol):
    """Text to float32 mono at ``sample_rate``, one sentence at a time."""

    name: str
    default_voice: str

    async def synthesize(self, text: str, voice: str | None = None) -> np.ndarray: ...


def split_sentences(text: str, max_chars: int = MAX_SENTENCE_CHARS) -> list[str]:
    """Sentences (and over-long sentences' clauses) in order; blank pieces dropped. The first
    sentence is split again at its first comma: the voice starts once that clause is synthesised
    (Piper here: 0.07 s for "Hello there," against 0.2 s for "Hello there, I am the avatar."),
    and a comma is where speech pauses anyway."""
    pieces = _sentences(text, max_chars)
    if pieces:
        pieces[:1] = _CLAUSE_END.split(pieces[0], maxsplit=1)
    return pieces


def _sentences(text: str, max_chars: int) -> list[str]:
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        sentence = " ".join(sentence.split())
        if not sentence:
            continue
        if len(sentence) <= max_chars:
            pieces.append(sentence)
            continue
        current = ""
        for clause in _CLAUSE_END.split(sentence):
            if current and len(current) + 1 + len(clause) > max_chars:
                pieces.append(current)
                current = clause
            else:
                current = f"{current} {clause}" if current else clause
            while len(current) > max_chars:
                cut = current.rfind(" ", 0, max_chars)
                cut = cut if cut > 0 else max_chars
                pieces.append(current[:cut])
                current = current[cut:].strip()
        if current:
            pieces.append(current)
    return pieces


async def stream(backend: TTSBackend, text: str, voice: str | None = None) -> AsyncIterator[np.ndarray]:
    """Synthesise ``text`` sentence by sentence; each yield is one sentence's audio."""
    for sentence in split_sentences(text):
        samples = await backend.synthesize(sentence, voice)
        if samples.size:
            yield samples


# ---- espeak-ng ----------------------------------------------------------------------------


class EspeakTTS:
    name = "espeak"
    default_voice = "en-us"

    def __init__(self, sample_rate: int, program: EspeakProgram, timeout_s: float = 30.0) -> None:
        self.sample_rate = sample_rate
        self.program = program
        self.timeout_s = timeout_s

    async def synthesize(self, text: str, voice: str | None = None) -> np.ndarray:
        return await synthesize(text, self.sample_rate, self.program, voice or self.default_voice, self.timeout_s)


async def synthesize(text: str, sample_rate: int, program: EspeakProgram, voice: str = "en-us",
                     timeout_s: float = 30.0) -> np.ndarray:
    """Speak ``text`` with espeak-ng; float32 mono at ``sample_rate``."""
    command = program.command(text, voice)
    try:
        proc = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
    except FileNotFoundError as exc:
        raise TTSUnavailable(f"{command[0]} is not installed (Debian/Ubuntu: apt-get install espeak-ng)") from exc
    try:
        wav, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError as exc:
        proc.kill()
        await proc.wait()
        raise TTSError(f"{command[0]} took longer than {timeout_s:.0f} s") from exc
    if proc.returncode != 0 or not wav:
        raise TTSError(f"{command[0]} failed: {err.decode(errors='replace').strip() or proc.returncode}")
    try:
        pcm, rate = program.read_wav(wav)
    except (ValueError, EOFError) as exc:
        raise TTSError(f"{command[0]} wrote no readable WAV: {exc}") from exc
    return resample_pcm16(pcm, rate, sample_rate)


class NoSpeech:
    """What ``speak`` gets where no text-to-speech backend was given."""

    name = "none"
    default_voice = ""

    async def synthesize(self, text: str, voice: str | None = None) -> np.ndarray:
        raise TTSUnavailable("this server has no text-to-speech backend")


# ---- Piper --------------------------------------------------------------------------------

class PiperTTS:
    """Piper voices loaded once per server and shared by its sessions (one synthesis at a time each)."""

    name = "piper"

    def __init__(self, sample_rate: int, piper: PiperVoices, model: Path | None = None, threads: int = 1) -> None:
        if not piper.available():
            raise TTSUnavailable(f"the Piper backend needs the piper-tts package: {piper.PIPER_INSTALL}")
        self.sample_rate = sample_rate
        self.threads = threads
        self._piper = piper
        self.models = piper.installed_voices(model)
        if not self.models:
            raise TTSUnavailable(f"no Piper voice is installed: {piper.PIPER_INSTALL}, or set AVATAR_PIPER_MODEL")
        if model is not None and not model.is_file():
            raise TTSUnavailable(f"Piper model {model} does not exist")
        self.default_voice = model.name.removesuffix(".onnx") if model is not None else "joe"
        self._voices: dict[str, object] = {}
        self._lock = threading.Lock()
        self._load(self.default_voice)

    def _load(self, name: str):
        """Load (once) the ONNX session of voice ``name``; called from worker threads."""
        with self._lock:
            voice = self._voices.get(name)
            if voice is None:
                loaded = self._piper.load_voice(self.models[name], self.threads)
                voice = self._voices[name] = (loaded, threading.Lock())
            return voice

    async def synthesize(self, text: str, voice: str | None = None) -> np.ndarray:
        name = voice or self.default_voice
        if name not in self.models:
            raise TTSError(f"unknown Piper voice {name!r}; installed: {', '.join(sorted(self.models))}")
        return await asyncio.to_thread(self._run, name, text)

    def _run(self, name: str, text: str) -> np.ndarray:
        piper_voice, lock = self._load(name)
        with lock:
            audio, rate = self._piper.synthesize(piper_voice, text)
        return resample_pcm16(float_to_pcm16(audio), rate, self.sample_rate)


def create_backend(name: Backend, sample_rate: int, piper_model: Path | None = None,
                   piper: PiperVoices | None = None, espeak: EspeakProgram | None = None) -> TTSBackend:
    """The configured backend, Piper's voices from ``piper``, espeak-ng from ``espeak``; raises
    :class:`TTSUnavailable` with an install hint when it is missing.

    espeak-ng is checked lazily (a server without it still serves mirror mode and pushed audio; ``speak``
    answers with a ``tts_unavailable`` error), Piper eagerly (choosing it and not having it is a
    configuration mistake worth failing on at start-up).
    """
    if name == "espeak":
        if espeak is None:
            raise TTSUnavailable("the espeak backend was given no espeak-ng program")
        return EspeakTTS(sample_rate, espeak)
    if name == "piper":
        if piper is None:
            raise TTSUnavailable("the Piper backend was given no Piper voices")
        return PiperTTS(sample_rate, piper, piper_model)
    raise TTSUnavailable(f"unknown TTS backend {name!r}; choose espeak or piper")
