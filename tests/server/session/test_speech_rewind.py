"""Agent speech back over the silence fed in the engine's lookahead, as the feed clock places it."""

from __future__ import annotations

import numpy as np

from server.media.microphone import SampleFifo
from server.session.feeder import Feeder
from server.session.speech_rewind import SpeechRewind
from server.voice.speech import SpeechQueue, Utterance

SR = 16_000


def utt(uid: str, n: int, value: float = 0.5) -> Utterance:
    return Utterance(uid, np.full(n, value, np.float32))


def test_the_rewind_goes_back_over_silence_only_as_far_and_as_often_as_it_pays():
    q = SpeechQueue(60 * SR, 64)
    rewind = SpeechRewind(2560)
    assert rewind.start(8000, 320, q) == 8000  # nothing queued
    q.append(utt("a", 4000))
    assert rewind.start(8000, 320, q) == 8000 - 2560
    rewind.fed(8000 - 2560, 2880, 8320, rewound=True)
    assert rewind.sealed == 8320  # not again before as much silence is fed anew
    assert rewind.start(8320 + 1000, 320, q) == 8320 + 1000  # 1000 < half of 2560: stays
    assert rewind.start(8320 + 1280, 320, q) == 8320  # 1280: back to the seal
    rewind.seal(9000)
    assert rewind.start(8320 + 1280, 320, q) == 8320 + 1280
    assert SpeechRewind(0).start(8000, 320, q) == 8000  # an engine that takes nothing back


def rewriting_feeder(back: int) -> Feeder:
    """An agent feeder whose engine takes audio fed again ``back`` samples before the end."""
    return Feeder(SR, SpeechQueue(60 * SR, 64), SampleFifo(SR), 0.0, 8 * SR, "agent", rewrite_samples=back)


def test_speech_queued_after_silence_goes_back_over_the_silence_not_made_into_frames():
    f = rewriting_feeder(2560)
    f.start(0.0)
    f.tick(0.5, 0)  # 8000 samples of silence
    f.speech.append(utt("a", 4000))
    block = f.tick(0.52, 0)  # 320 more due
    assert block.start == 8000 - 2560 and block.samples.size == 2560 + 320
    assert block.samples.min() == 0.5 and f.fed == 8320
    (seg,) = block.segments
    assert (seg.start, seg.end, seg.first, seg.last) == (0, 2880, True, False)
    follow = f.tick(0.54, 0)  # the speech runs on from where it got to: no second jump back
    assert follow.start == 8320 and follow.samples.min() == 0.5 and follow.segments[0].start == 0
    assert f.speech.pending_samples == 4000 - 2880 - 320


def test_speech_streamed_in_real_time_starts_where_the_feed_is():
    """An open utterance with less queued than the jump back would refill: no jump (the frames
    would be made before the rest of the voice arrived)."""
    f = rewriting_feeder(2560)
    f.start(0.0)
    f.tick(0.5, 0)
    u = f.speech.open("s")
    f.speech.extend(u, np.full(320, 0.5, np.float32))
    block = f.tick(0.52, 0)
    assert block.start == 8000 and block.samples[:320].min() == 0.5
    f.speech.extend(u, np.full(320, 0.5, np.float32))
    assert f.tick(0.54, 0).start == 8320  # in time: it runs on
    assert not f.tick(0.56, 0).samples.any()  # the next packet is late: 320 samples of silence
    f.speech.extend(u, np.full(960, 0.5, np.float32))
    assert f.tick(0.58, 0).start == 8960  # a gap that short stays (going back costs a rehearing)
    for t in (0.60, 0.62, 0.64, 0.66, 0.68, 0.70):  # a long stall: 1280 samples of silence after the voice
        f.tick(t, 0)
    f.speech.extend(u, np.full(3200, 0.5, np.float32))
    block = f.tick(0.72, 0)
    assert block.start == 11200 - 1280  # back over that silence, to where the voice left off
    assert block.samples.size == 1600 and block.samples.min() == 0.5


def test_a_flood_of_tiny_utterances_never_goes_back():
    f = rewriting_feeder(2560)
    f.start(0.0)
    f.tick(0.5, 0)
    starts, ends = [], []
    for k in range(1, 50):
        f.speech.append(utt(f"u{k}", 1))
        ends.append(f.fed)
        starts.append(f.tick(0.5 + 0.02 * k, 0).start)
    assert starts[0] == 8000 - 2560  # the first, after silence, goes back
    assert starts[1:] == ends[1:]  # the rest each at the end of what was fed, none back


def test_a_short_closed_utterance_goes_back_too_and_silence_follows_it():
    f = rewriting_feeder(2560)
    f.start(0.0)
    f.tick(0.5, 0)
    f.speech.append(utt("a", 1000))
    block = f.tick(0.52, 0)
    assert block.start == 8000 - 2560
    assert block.samples[:1000].min() == 0.5 and not block.samples[1000:].any()
    (seg,) = block.segments
    assert (seg.first, seg.last) == (True, True)


def test_no_speech_goes_back_over_what_an_interrupt_muted_or_the_microphone_fed():
    f = rewriting_feeder(2560)
    f.start(0.0)
    f.tick(0.5, 0)
    f.seal()  # an interrupt: what was fed is muted from its cut on
    f.tick(0.6, 0)
    f.speech.append(utt("a", 4000))
    assert f.tick(0.62, 0).start == 8000 + 1600 - 2560 + 960  # only back to the seal
    m = rewriting_feeder(2560)
    m.mode = "mirror"
    m.start(0.0)
    m.tick(0.5, 0)
    m.mode = "agent"
    m.speech.append(utt("a", 4000))
    assert m.tick(0.52, 0).start == 8000  # the user's audio is never fed over


def test_a_feeder_whose_engine_takes_nothing_back_feeds_speech_at_the_end():
    f = rewriting_feeder(0)
    f.start(0.0)
    f.tick(0.5, 0)
    f.speech.append(utt("a", 4000))
    assert f.tick(0.52, 0).start == 8000

