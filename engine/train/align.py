"""Forced alignment of speech to its known text with CMU Sphinx (the ``pocketsphinx`` wheel's
bundled en-us acoustic model and dictionary): phone timings for voices that do not report
their own (Piper). Sphinx's model was trained on real voices; it aligns a natural voice well
and espeak-ng's formant voices poorly, which is why espeak-ng reports its own timings.
"""

from __future__ import annotations

import re

import numpy as np

from engine.puppet.visemes import Phone

SAMPLE_RATE = 16000
_FRAME = 0.01  # Sphinx's frame: 10 ms


class AlignmentError(RuntimeError):
    """The audio could not be aligned to the text."""


def _decoder():
    """A fresh decoder per alignment: one left in phone-alignment mode crashes on new text."""
    from pocketsphinx import Decoder

    return Decoder(samprate=SAMPLE_RATE, loglevel="FATAL", bestpath=False)


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def align(pcm: np.ndarray, text: str) -> list[Phone]:
    """16 kHz mono float ``pcm`` saying ``text`` -> its phones (ARPAbet, ``SIL`` for pauses)."""
    said = words(text)
    if not said or not pcm.size:
        raise AlignmentError("nothing to align")
    raw = (np.clip(pcm, -1.0, 1.0) * 32767.0).astype(np.int16).tobytes()
    decoder = _decoder()
    try:
        decoder.set_align_text(" ".join(said))
        _decode(decoder, raw)  # the word pass
        if decoder.hyp() is None:
            raise AlignmentError(f"no alignment for {text!r}")
        decoder.set_alignment()
        _decode(decoder, raw)  # the phone pass over the words found (its hyp() is not to be asked)
        phones = [Phone(p.name, p.start * _FRAME, (p.start + p.duration) * _FRAME)
                  for word in decoder.get_alignment() for p in word]
    except RuntimeError as err:
        raise AlignmentError(f"no alignment for {text!r}: {err}") from err
    return phones


def _decode(decoder, raw: bytes) -> None:
    decoder.start_utt()
    decoder.process_raw(raw, full_utt=True)
    decoder.end_utt()
