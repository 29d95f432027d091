"""Property-based fuzzing of pushed PCM (``audio.append``, as JSON base64 or a binary message): any
bytes at any rate the protocol admits, with utterance ids, commits and interrupts in any order.
Each request is taken or refused with a ``ControlError`` (its code one of the documented ones), and
what the session holds stays within its bounds: samples, utterances, finite audio within
resampling's overshoot of [-1, 1]."""

from __future__ import annotations

import numpy as np
from fuzz_budget import fuzz
from hypothesis import given
from hypothesis import strategies as st

from server.base.errors import ControlError
from server.base.metrics import ServerMetrics
from server.base.protocol import MAX_RATE, MIN_RATE
from server.voice.intake import SpeechIntake
from server.voice.speech import SpeechQueue

SR = 16000
MAX_SAMPLES = SR  # one second of backlog: reached within a few appends
MAX_UTTERANCES = 4
CODES = {"bad_audio", "audio_backlog", "too_many_utterances", "empty_commit", "utterance_mismatch"}

pcm = st.one_of(
    st.binary(max_size=2048),
    st.sampled_from([b"RIFF", b"OggS", b"fLaC", b"ID3\x03"]).flatmap(lambda m: st.binary(max_size=64).map(m.__add__)),
    st.integers(1, 6000).map(lambda n: np.full(n, 32767, "<i2").tobytes()),
)
rates = st.one_of(st.sampled_from([MIN_RATE, 16000, 22050, 24000, 44100, 48000, MAX_RATE]),
                  st.integers(MIN_RATE, MAX_RATE))
ids = st.one_of(st.none(), st.sampled_from(["a", "b", "c", "d", "e", "f"]))
steps = st.lists(st.one_of(
    st.tuples(st.just("append"), pcm, rates, ids),
    st.tuples(st.just("commit"), ids),
    st.tuples(st.just("interrupt")),
    st.tuples(st.just("take"), st.integers(0, SR)),
), max_size=20)


@fuzz(200)
@given(steps)
def test_pushed_pcm_is_taken_or_refused_within_the_bounds(ops: list[tuple]) -> None:
    speech = SpeechQueue(MAX_SAMPLES, MAX_UTTERANCES)
    intake = SpeechIntake(speech, SR, 2000, None, lambda event: None, ServerMetrics(), backend=object())
    for op, *args in ops:
        try:
            if op == "append":
                intake.append(*args)
            elif op == "commit":
                intake.commit(*args)
            elif op == "interrupt":
                intake.interrupt()
            else:
                block, _ = speech.take(*args)
                # Resampling a full-scale step overshoots a little (output is clipped to PCM16 later).
                assert np.isfinite(block).all() and np.abs(block).max(initial=0) <= 1.1
        except ControlError as exc:
            assert exc.code in CODES, exc.code
        assert speech.pending_samples <= MAX_SAMPLES
        assert len(speech) <= MAX_UTTERANCES
