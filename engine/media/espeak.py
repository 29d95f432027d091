"""espeak-ng, the one way the engine speaks with it: text, voice, rate and pitch in; mono float32
speech, its sample rate and (where asked) the synthesiser's own phone timings out.

Phones come from espeak-ng's C library: it reports a phoneme event at the exact sample each phone
starts, which is the phonetic truth of the speech it makes (no alignment, no recogniser). Phones
come back in ARPAbet, the notation of ``engine.puppet.visemes``. Without phones, the command line
(Debian ``espeak-ng``) writes a WAV stream that is parsed with ``wave``: :func:`command` gives its
arguments and :func:`read_wav` its samples, for a caller that runs it as it likes (an event loop's
subprocess), and :func:`synthesize` runs it here.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import io
import multiprocessing
import subprocess
import threading
import wave
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from engine.puppet.visemes import Phone

T = TypeVar("T")

ESPEAK = "espeak-ng"
DEFAULT_VOICE = "en-us"
DEFAULT_RATE = 175  # words per minute: espeak-ng's own default
DEFAULT_PITCH = 50  # 0-99: espeak-ng's own default

_SYNCHRONOUS = 2  # AUDIO_OUTPUT_SYNCHRONOUS: audio comes back through the callback
_PHONEME_EVENTS = 0x0001  # espeakINITIALIZE_PHONEME_EVENTS
_EVENT_END, _EVENT_PHONEME = 0, 7
_RATE, _PITCH = 1, 3  # espeak_PARAMETER
_POS_CHARACTER = 1

# espeak-ng's English phoneme mnemonics -> ARPAbet (stress and length marks stripped first).
_ARPABET = {
    "p": "P", "b": "B", "m": "M", "f": "F", "v": "V", "T": "TH", "D": "DH", "t": "T", "d": "D", "n": "N",
    "l": "L", "s": "S", "z": "Z", "S": "SH", "Z": "ZH", "tS": "CH", "dZ": "JH", "k": "K", "g": "G", "N": "NG",
    "h": "HH", "w": "W", "r": "R", "j": "Y", "?": "T",
    "a": "AE", "aa": "AA", "A": "AA", "A@": "AA", "aI": "AY", "aI@": "AY", "aI3": "AY", "aU": "AW", "aU@": "AW",
    "e": "EH", "E": "EH", "e@": "EH", "eI": "EY", "@": "AH", "@L": "AH", "@2": "AH", "@5": "AH", "V": "AH",
    "3": "ER", "3:": "ER", "i": "IY", "i:": "IY", "i@": "IY", "i@3": "IY", "I": "IH", "I2": "IH", "I#": "IH",
    "O": "AO", "O:": "AO", "O@": "AO", "o@": "AO", "OI": "OY", "oU": "OW", "o": "OW", "0": "AA",
    "u:": "UW", "u": "UW", "U": "UH", "U@": "UH",
}


class _Event(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint), ("text_position", ctypes.c_int),
                ("length", ctypes.c_int), ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
                ("user_data", ctypes.c_void_p), ("id", ctypes.c_char * 8)]


_Callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))


def arpabet(mnemonic: str) -> str:
    """ARPAbet for an espeak-ng mnemonic; pauses and unknown marks are silence (``SIL``)."""
    key = mnemonic.strip("'`,%=;/-#") if mnemonic not in ("@2", "@5", "I2", "I#") else mnemonic
    if key in _ARPABET:
        return _ARPABET[key]
    return _ARPABET.get(key.rstrip(":23"), "SIL")


class _Library:
    """The loaded library and the buffers its callback fills; one synthesis at a time."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libespeak-ng.so.1")
        self.sample_rate = self.lib.espeak_Initialize(_SYNCHRONOUS, 0, None, _PHONEME_EVENTS)
        if self.sample_rate <= 0:
            raise RuntimeError("espeak-ng failed to initialise (Debian package espeak-ng)")
        self.audio: list[np.ndarray] = []
        self.events: list[tuple[str, int]] = []
        self.callback = _Callback(self._collect)
        self.lib.espeak_SetSynthCallback(self.callback)
        self.lock = threading.Lock()

    def _collect(self, wav, count: int, events) -> int:
        if wav and count > 0:
            self.audio.append(np.ctypeslib.as_array(wav, (count,)).astype(np.float32) / 32768.0)
        i = 0
        while events[i].type != _EVENT_END:
            if events[i].type == _EVENT_PHONEME:
                self.events.append((events[i].id.decode("ascii", "replace").rstrip("\x00"), events[i].sample))
            i += 1
        return 0

    def speak(self, text: str, voice: str, rate: int, pitch: int) -> tuple[np.ndarray, list[tuple[str, int]]]:
        with self.lock:
            self.audio, self.events = [], []
            if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise RuntimeError(f"espeak-ng has no voice {voice!r}")
            self.lib.espeak_SetParameter(_RATE, rate, 0)
            self.lib.espeak_SetParameter(_PITCH, pitch, 0)
            data = text.encode()
            self.lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0, 0, None, None)
            self.lib.espeak_Synchronize()
            pcm = np.concatenate(self.audio) if self.audio else np.zeros(0, np.float32)
            return pcm, self.events


@functools.cache
def _library() -> _Library:
    return _Library()


@dataclass(frozen=True)
class Speech:
    """Mono float32 audio and the phones it says, timed in seconds from its first sample."""

    pcm: np.ndarray
    phones: list[Phone]
    sample_rate: int

    @property
    def seconds(self) -> float:
        return self.pcm.size / self.sample_rate

    def pcm16(self) -> np.ndarray:
        """The samples as int16."""
        return (np.clip(self.pcm, -1.0, 1.0) * 32767).astype(np.int16)


def resample(pcm: np.ndarray, src_rate: int, rate: int) -> np.ndarray:
    """Linear resampling: plenty for mel features of speech."""
    if src_rate == rate or not pcm.size:
        return pcm.astype(np.float32)
    n = int(round(pcm.size * rate / src_rate))
    return np.interp(np.arange(n) * src_rate / rate, np.arange(pcm.size), pcm).astype(np.float32)


def forked(fn: Callable[..., T], *args) -> T:
    """``fn(*args)`` run in a child forked for it, with the garbage collector off there: the child
    inherits the parent's uncollected garbage, and freeing some of it in a child hangs (a PyAV
    filter graph's slice threads were not forked with it, and freeing it waits for them)."""
    enabled = gc.isenabled()
    gc.disable()  # the child starts with the collector off ...
    try:
        with multiprocessing.get_context("fork").Pool(1) as pool:
            return pool.apply(fn, args)
    finally:  # ... and the parent gets it back once the child is forked and done
        if enabled:
            gc.enable()


def speak(text: str, voice: str = DEFAULT_VOICE, rate: int = DEFAULT_RATE, pitch: int = DEFAULT_PITCH,
          sample_rate: int | None = None) -> Speech:
    """``text`` in an espeak-ng voice with the phones it says, timed by the synthesiser's own
    phoneme events; at ``sample_rate`` (resampled linearly) or else espeak-ng's own rate.

    The library keeps state from one synthesis to the next (its noise generator, the voice's
    smoothing), so each runs in a fresh forked process: the same text gives the same samples,
    as the command line does, and a seeded training run is reproducible."""
    pcm, src_rate, phones = forked(_speak_phones, text, voice, rate, pitch)
    rate_out = sample_rate or src_rate
    return Speech(resample(pcm, src_rate, rate_out), phones, rate_out)


def _speak_phones(text: str, voice: str, rate: int, pitch: int) -> tuple[np.ndarray, int, list[Phone]]:
    # The voices' noise (whisper, breath) comes from the C library's rand(), whose state a forked
    # process inherits: it starts where a fresh process's does, whatever the parent drew before.
    ctypes.CDLL(None).srand(1)
    lib = _library()
    pcm, events = lib.speak(text, voice, rate, pitch)
    if not events:
        return pcm, lib.sample_rate, []
    origin = events[0][1]
    starts = [(s - origin) / lib.sample_rate for _, s in events] + [pcm.size / lib.sample_rate]
    phones = [Phone(arpabet(name), starts[i], max(starts[i + 1], starts[i])) for i, (name, _) in enumerate(events)]
    return pcm, lib.sample_rate, [p for p in phones if p.end > p.start]


def command(text: str, voice: str = DEFAULT_VOICE, rate: int | None = None, pitch: int | None = None) -> list[str]:
    """The espeak-ng command line that writes ``text``'s speech to stdout as WAV."""
    args = [ESPEAK, "--stdout", "-v", voice]
    if rate is not None:
        args += ["-s", str(rate)]
    if pitch is not None:
        args += ["-p", str(pitch)]
    return [*args, "--", text]


def read_wav(data: bytes) -> tuple[np.ndarray, int]:
    """16-bit WAV bytes -> (int16 mono samples, sample rate); channels are averaged. A WAV written
    as a stream (espeak-ng's ``--stdout``) has placeholder sizes in its header: its data is read
    to the end rather than trusted."""
    with wave.open(io.BytesIO(data)) as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"expected 16-bit samples, got {8 * w.getsampwidth()}-bit")
        channels, rate = w.getnchannels(), w.getframerate()
        frames = w.readframes(w.getnframes())
    samples = np.frombuffer(frames[: len(frames) // 2 * 2], dtype="<i2")
    if channels > 1:
        samples = samples[: samples.size // channels * channels].reshape(-1, channels).mean(axis=1)
    return samples.astype(np.int16), rate


def synthesize(text: str, voice: str = DEFAULT_VOICE, rate: int | None = None, pitch: int | None = None,
               timeout_s: float = 30.0) -> Speech:
    """``text`` through the espeak-ng command line: its samples at espeak-ng's rate, no phones.
    ``FileNotFoundError`` when espeak-ng is not installed; ``RuntimeError`` when it fails."""
    done = subprocess.run(command(text, voice, rate, pitch), capture_output=True, timeout=timeout_s, check=False)
    if done.returncode != 0 or not done.stdout:
        raise RuntimeError(f"{ESPEAK} failed: {done.stderr.decode(errors='replace').strip() or done.returncode}")
    samples, sample_rate = read_wav(done.stdout)
    return Speech(samples.astype(np.float32) / 32768.0, [], sample_rate)
