"""The microphone's jitter buffer: underruns grow it (silence fed in the missing audio's place,
the audio queued behind), a steady spell trims it back where it is quiet (fake clock)."""

from __future__ import annotations

import numpy as np
import pytest

from server.media.microphone import SampleFifo
from server.session.feeder import Feeder
from server.session.mic_jitter import MicJitter
from server.voice.speech import SpeechQueue

SR = 16_000
PACKET = SR // 50  # 20 ms


def test_only_a_steady_spell_frees_what_the_buffer_never_needed() -> None:
    j = MicJitter()
    j.underrun(1.0)
    levels = np.full(100, 0.1)
    levels[50] = 0.0  # one late burst drained it for a moment
    for k, level in enumerate(levels[:-1]):
        assert j.excess(1.0 + 0.05 * k, level) == 0.0  # not steady for 5 s yet
    assert j.excess(6.0, levels[-1]) == pytest.approx(0.1 - 0.02)  # what it kept, less a packet
    j.trimmed(0.02)
    assert j.excess(6.02, 0.08) == pytest.approx(0.06)  # a packet dropped: the rest still to go
    j.trimmed(0.06)
    assert j.excess(6.04, 0.02) == 0.0 and j.trimmed_s == pytest.approx(0.08)
    for k in range(100):  # a fifth of the spell near empty: nothing to spare
        assert j.excess(6.05 + 0.05 * k, 0.1 if k % 5 else 0.005) == 0.0
    j.underrun(12.0)
    assert j.excess(16.9, 0.05) == 0.0 and j.underruns == 2


def test_a_loud_head_is_never_trimmed() -> None:
    fifo = SampleFifo(SR)
    fifo.push(np.full(PACKET, 0.5, np.float32))
    fifo.push(np.zeros(PACKET, np.float32))
    assert fifo.drop_quiet(PACKET, 0.01) == 0 and len(fifo) == 2 * PACKET
    assert fifo.take(1)[0] == 0.5
    fifo.take(PACKET - 1)
    assert fifo.drop_quiet(PACKET, 0.01) == PACKET and len(fifo) == 0


def _run(feeder: Feeder, arrivals: np.ndarray, loud: np.ndarray, until: float) -> tuple[np.ndarray, np.ndarray]:
    """Packet k (loud ones hold k + 1, quiet ones 0.001) arrives at ``arrivals[k]``; the feed
    clock ticks every 20 ms (of its own time) until ``until``; returns what it fed and the audio
    left waiting (seconds) after each tick."""
    fed, waiting, k = [], [], 0
    for step in range(1, int(round(until / 0.02)) + 1):
        now = step * 0.02
        while k < len(arrivals) and arrivals[k] <= now + 1e-9:
            feeder.hear_mic(np.full(PACKET, k + 1.0 if loud[k] else 0.001, np.float32), arrivals[k])
            k += 1
        fed.append(feeder.tick(now, generated_samples=feeder.fed).samples)
        waiting.append(len(feeder.mic) / SR)
    return np.concatenate(fed), np.array(waiting)


def test_a_jittery_microphone_grows_the_buffer_loses_no_word_and_it_shrinks_back_when_steady() -> None:
    rng = np.random.default_rng(0)
    feeder = Feeder(SR, SpeechQueue(SR, 4), SampleFifo(SR), 0.04, 8 * SR, "mirror")
    feeder.start(0.0)
    n = 1000  # 20 s of packets: 8 s with 0-100 ms of delay, then none
    sent = np.arange(1, n + 1) * 0.02
    arrivals = np.maximum.accumulate(sent + np.where(np.arange(n) < 400, rng.uniform(0.0, 0.1, n), 0.0))
    loud = (np.arange(n) // 25) % 2 == 0  # half a second of voice, half a second of quiet
    fed, waiting = _run(feeder, arrivals, loud, 20.0)

    assert feeder.jitter.underruns >= 1, "late packets left due audio missing"
    assert waiting[420:520].min() > 0.04 + 0.04, "so the audio behind them waits longer than the holdback"
    words = fed[fed >= 1.0]
    packets = words[::PACKET].astype(int)
    assert np.array_equal(packets, (np.flatnonzero(loud) + 1)[:packets.size]), "every loud packet fed, in order"
    assert packets.size >= loud[:900].sum()
    assert feeder.jitter.trimmed_s > 0.04, "until a steady spell trims it"
    assert waiting[-100:].max() <= 0.04 + 1e-9, "to what the steady network needs: a packet's margin"


def test_a_packet_that_came_just_after_a_tick_counts_its_wait_as_slack() -> None:
    """Packets that come 2 ms after each tick have waited 18 ms by the next: the trim leaves them a
    packet's margin in all, not the margin on top of the 18 ms."""
    feeder = Feeder(SR, SpeechQueue(SR, 4), SampleFifo(SR), 0.04, 8 * SR, "mirror")
    feeder.start(0.0)
    n = 500
    arrivals = np.arange(1, n + 1) * 0.02 + 0.002
    waits, k = [], 0
    for step in range(1, n):
        now = step * 0.02
        while k < n and arrivals[k] <= now + 1e-9:
            loud = k % 5 != 0  # a quiet packet in every five, where a trim may fall
            feeder.hear_mic(np.full(PACKET, k + 1.0 if loud else 0.001, np.float32), arrivals[k])
            k += 1
        block = feeder.tick(now, generated_samples=feeder.fed).samples
        heard = block[block >= 1.0]
        waits.append(float(np.mean(now - arrivals[heard.astype(int) - 1])) if heard.size else np.nan)
    assert feeder.jitter.underruns == 0 and feeder.jitter.trimmed_s > 0.015
    assert np.nanmean(waits[:100]) > 0.035, "each sample waits a packet and most of a tick at first"
    assert 0.017 < np.nanmean(waits[-100:]) <= 0.025, "a packet's margin in all, once steady"
