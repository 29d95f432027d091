"""Held-out test material: identities, sentences and voices that training never sees.

Training must not draw from these lists: identity seeds at or above ``HELD_OUT_SEED``,
the sentences in ``EVAL_SENTENCES`` (grammatical English; training speaks random word
strings) and the voices in ``EVAL_VOICES``. Rates and pitches stay inside the training
ranges: the test is generalisation to new voices and words, not extrapolation.
Speech comes from Debian ``espeak-ng`` (offline, ``engine.media.espeak``), resampled to the engine's
rate, with the phones it says and when (the synthesiser's own timings): the mouth's ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.media.espeak import Speech, speak
from engine.puppet import Identity
from engine.puppet.mouth import MouthTrack, phone_track
from engine.puppet.visemes import Phone
from engine.train.frame_readers import HELD_OUT_SEED

EVAL_SENTENCES: tuple[str, ...] = (
    "Bright lanterns drift across the quiet harbour before midnight.",
    "Would you pass the blue notebook that sits beside the window?",
    "Seven orange kites looped over the meadow, then vanished behind the hills.",
    "My grandmother kept a jar of buttons older than the house itself.",
    "Please remember to water the ferns on Tuesday and again on Friday.",
    "The violinist tuned her strings while thunder rolled in from the coast.",
    "Who decided that breakfast should be eaten before noon?",
    "A small brown owl watched us quietly from the old oak tree.",
    "If the train is late again, we will walk along the river instead.",
    "Wooden boats rocked gently as the fishermen unloaded their nets.",
    "Uncover the soup, stir it slowly, and taste it once more.",
    "Everybody cheered when the tiny robot finally climbed the stairs.",
)
# Voices outside engine.train.speech.VOICES (its HELD_OUT_VOICES plus two more accents).
EVAL_VOICES: tuple[str, ...] = ("en-us+f1", "en+m1", "en-gb-x-gbclan", "en-gb-x-gbcwmd+m7", "en-us-nyc+m6")
EVAL_RATES: tuple[int, ...] = (135, 160, 190)  # words per minute
EVAL_PITCHES: tuple[int, ...] = (35, 50, 70)


@dataclass(frozen=True)
class Clip:
    """One test clip: who speaks, what audio drives them, and where it came from."""

    name: str
    identity: Identity
    identity_seed: int
    pcm: np.ndarray
    sample_rate: int
    description: str
    phones: tuple[Phone, ...] = ()  # what the speech says and when: the mouth's ground truth

    @property
    def seconds(self) -> float:
        return self.pcm.shape[0] / self.sample_rate

    def truth(self, fps: int) -> MouthTrack:
        """The mouth ground truth of every video frame, from the clip's phones."""
        return phone_track(list(self.phones), self.pcm, self.sample_rate, fps)


def silence(seconds: float, sample_rate: int) -> np.ndarray:
    return np.zeros(round(seconds * sample_rate), dtype=np.float32)


def utterance(k: int, sample_rate: int) -> tuple[Speech, str]:
    """The k-th held-out utterance: sentence, voice, rate and pitch all cycle at different periods."""
    text = EVAL_SENTENCES[k % len(EVAL_SENTENCES)]
    voice = EVAL_VOICES[k % len(EVAL_VOICES)]
    rate = EVAL_RATES[k % len(EVAL_RATES)]
    pitch = EVAL_PITCHES[(k // len(EVAL_RATES)) % len(EVAL_PITCHES)]
    return speak(text, voice, rate, pitch, sample_rate), f"{voice} {rate}wpm p{pitch}: {text}"


def make_clip(i: int, sample_rate: int, seed: int = 0, sentences: int = 2) -> Clip:
    """Clip i: a held-out identity and ``sentences`` held-out utterances with pauses between
    (the pauses exercise listening motion and mouth closure)."""
    ident_seed = HELD_OUT_SEED + 1000 * seed + i
    ident = Identity.sample(np.random.default_rng(ident_seed), name=f"heldout{ident_seed}")
    parts, notes, phones = [silence(0.4, sample_rate)], [], []
    for j in range(sentences):
        said, note = utterance(i * sentences + j + 7 * seed, sample_rate)
        offset = sum(p.size for p in parts) / sample_rate
        phones += [Phone(p.name, p.start + offset, p.end + offset) for p in said.phones]
        parts += [said.pcm, silence(0.6, sample_rate)]
        notes.append(note)
    return Clip(f"clip{i}", ident, ident_seed, np.concatenate(parts), sample_rate, " | ".join(notes), tuple(phones))
