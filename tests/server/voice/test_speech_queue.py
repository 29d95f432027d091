"""The speech queue: ordered, bounded, growing utterances and where they sit in a pulled block."""

from __future__ import annotations

import numpy as np
import pytest

from server.voice.speech import BacklogFull, SpeechQueue, Utterance


def utt(uid: str, n: int, value: float = 0.5) -> Utterance:
    return Utterance(uid, np.full(n, value, np.float32))


def test_speech_queue_segments_span_utterances():
    q = SpeechQueue(10_000, 64)
    q.append(utt("a", 300))
    q.append(utt("b", 500))
    block, segs = q.take(400)
    assert block.size == 400
    assert [(s.utterance_id, s.start, s.end, s.first, s.last) for s in segs] == [
        ("a", 0, 300, True, True), ("b", 300, 400, True, False)]
    block, segs = q.take(1000)
    assert block.size == 400 and [(s.first, s.last) for s in segs] == [(False, True)]
    assert len(q) == 0


def test_speech_queue_backlog_cap_and_clear():
    q = SpeechQueue(1000, 64)
    q.append(utt("a", 600))
    with pytest.raises(BacklogFull):
        q.append(utt("b", 300), extra_pending=200)
    q.append(utt("c", 400))
    q.take(100)
    cut, unstarted = q.clear()
    assert cut.id == "a" and cut.fed == 100 and [u.id for u in unstarted] == ["c"]


def test_fills_says_whether_a_take_would_be_speech_all_through():
    q = SpeechQueue(10_000, 64)
    assert not q.fills(100)  # nothing queued
    q.append(utt("a", 300))
    assert q.fills(300) and q.fills(1000)  # a closed utterance ends: what follows is silence anyway
    u = q.open("b")
    q.extend(u, np.full(200, 0.5, np.float32))
    assert q.fills(500) and not q.fills(501)  # the open one still arriving would run dry
    q.close(u)
    assert q.fills(5000)
