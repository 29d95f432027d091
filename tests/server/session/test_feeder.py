"""The feed clock: how much audio the engine gets, and from where, at each tick; the microphone FIFO."""

from __future__ import annotations

import numpy as np

from server.media.microphone import SampleFifo
from server.session.feeder import Feeder
from server.voice.speech import SpeechQueue, Utterance

SR = 16_000


def utt(uid: str, n: int, value: float = 0.5) -> Utterance:
    return Utterance(uid, np.full(n, value, np.float32))


def make_feeder(mode="agent", holdback=0.0, backlog_s=8.0) -> Feeder:
    return Feeder(SR, SpeechQueue(60 * SR, 64), SampleFifo(SR), holdback, int(backlog_s * SR), mode)


def test_fifo_is_bounded_and_drops_oldest():
    fifo = SampleFifo(100)
    fifo.push(np.arange(80, dtype=np.float32))
    fifo.push(np.arange(80, 120, dtype=np.float32))
    assert len(fifo) == 100 and fifo.dropped == 20
    out = fifo.take(30)
    assert out[0] == 20 and out.size == 30 and len(fifo) == 70
    assert fifo.take(500).size == 70 and len(fifo) == 0


def test_feeder_feeds_real_time_silence_when_idle():
    f = make_feeder()
    f.prefill(7680)
    f.start(now=100.0)
    assert f.due(100.0) == 0
    block = f.tick(100.5, generated_samples=0)
    assert block.start == 7680 and block.samples.size == 8000 and not block.samples.any()
    assert f.tick(100.5, 0).samples.size == 0  # nothing new is due
    assert f.tick(101.0, 0).samples.size == 8000
    assert f.fed == 7680 + 16000


def test_feeder_places_speech_on_the_timeline_and_pads_with_silence():
    f = make_feeder()
    f.start(0.0)
    f.tick(0.1, 0)  # 1600 samples of silence
    f.speech.append(utt("a", 1000))
    block = f.tick(0.2, 0)
    assert block.start == 1600
    assert block.samples[:1000].min() == 0.5 and not block.samples[1000:].any()
    (seg,) = block.segments
    assert (seg.utterance_id, seg.start, seg.end, seg.first, seg.last) == ("a", 0, 1000, True, True)


def test_feeder_mirror_takes_microphone_with_holdback():
    f = make_feeder(mode="mirror", holdback=0.04)
    f.start(0.0)
    f.hear_mic(np.full(800, 0.25, np.float32), 0.0)
    assert f.tick(0.04, 0).samples.size == 0
    block = f.tick(0.1, 0)
    assert block.samples.size == 960 and block.samples[:800].min() == 0.25 and not block.samples[800:].any()


def test_feeder_skips_input_when_engine_is_too_far_behind():
    f = make_feeder(backlog_s=1.0)
    f.start(0.0)
    f.tick(1.5, generated_samples=0)  # 1.5 s fed, nothing generated: over the 1 s guard
    f.speech.append(utt("a", 800))
    block = f.tick(2.0, generated_samples=0)
    assert block.skipped == 8000 and block.samples.size == 0
    assert f.speech.pending_samples == 800  # speech waits; it is not thrown away
    assert f.tick(2.0, generated_samples=24000).samples.size == 0  # the skipped span is not owed later


def test_ticks_keep_to_the_clocks_grid_however_late_each_wakes():
    """A tick that wakes late does not push the next one later: every tick lands on the grid
    (a millisecond after it), so each feeds one tick's samples and frames complete a frame apart."""
    f = make_feeder(holdback=0.04)
    assert f.next_tick(5.0, 0.02) == 0.02  # before the clock starts: one tick
    f.start(10.0)
    now = 10.0
    while f.fed == 0:  # past the holdback
        now += f.next_tick(now, 0.02)
        f.tick(now, 0)
    late_before = 0.0
    for lateness in [0.0, 0.004, 0.011, 0.0, 0.019, 0.002] * 5:
        now += f.next_tick(now, 0.02) + lateness
        grid = (now - lateness - 10.04 - 0.001) / 0.02
        assert abs(grid - round(grid)) < 1e-6
        n = f.tick(now, 0).samples.size
        assert abs(n - round(SR * (0.02 + lateness - late_before))) <= 1  # what the late one took, this one does not
        late_before = lateness
    assert abs(f.fed - SR * (now - 10.04)) <= 1
