"""espeak-ng through its C library: speech and the synthesiser's own phone timings.

The command line gives audio or phonemes, never when each phone sounds; the library reports
a phoneme event at the exact sample each phone starts, which is the phonetic truth of the
speech it makes (no alignment, no recogniser). Phones come back in ARPAbet, the notation of
``engine.puppet.visemes``.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing
import threading

import numpy as np

from engine.puppet.visemes import Phone

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


def speak_phones(text: str, voice: str, rate: int, pitch: int) -> tuple[np.ndarray, int, list[Phone]]:
    """``text`` in an espeak-ng voice -> (float32 mono audio, its sample rate, its phones with the
    synthesiser's timings). A phone lasts until the next one starts.

    The library keeps state from one synthesis to the next (its noise generator, the voice's
    smoothing), so each runs in a fresh forked process: the same text gives the same samples,
    as the command line does, and a seeded training run is reproducible."""
    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply(_speak_phones, (text, voice, rate, pitch))


def _speak_phones(text: str, voice: str, rate: int, pitch: int) -> tuple[np.ndarray, int, list[Phone]]:
    lib = _library()
    pcm, events = lib.speak(text, voice, rate, pitch)
    if not events:
        return pcm, lib.sample_rate, []
    origin = events[0][1]
    starts = [(s - origin) / lib.sample_rate for _, s in events] + [pcm.size / lib.sample_rate]
    phones = [Phone(arpabet(name), starts[i], max(starts[i + 1], starts[i])) for i, (name, _) in enumerate(events)]
    return pcm, lib.sample_rate, [p for p in phones if p.end > p.start]
