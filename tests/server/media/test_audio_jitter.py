"""The microphone's receive jitter buffer: in-order packets at once, reordered ones put back, a loss
given up without lasting delay, and joined Opus packets that libopus decodes as the originals."""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np
import pytest
from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtp import RtpPacket

from server.media.audio_jitter import AudioJitterBuffer, frame_ms, join_opus

RATE, SAMPLES = 48_000, 960


def opus_packets(seconds: float = 1.0) -> list[bytes]:
    """Real 20 ms Opus packets (libopus through PyAV) of a voice-like tone sweep."""
    enc = av.CodecContext.create("libopus", "w")
    enc.sample_rate, enc.format, enc.layout, enc.bit_rate = RATE, "s16", "mono", 32_000
    enc.time_base = Fraction(1, RATE)
    t = np.arange(int(seconds * RATE)) / RATE
    pcm = (8000 * np.sin(2 * np.pi * (150 + 100 * t) * t) * (1 + np.sin(2 * np.pi * 3 * t))).astype(np.int16)
    out = []
    for i in range(0, pcm.size - SAMPLES + 1, SAMPLES):
        frame = av.AudioFrame.from_ndarray(pcm[None, i:i + SAMPLES], format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = RATE, i, Fraction(1, RATE)
        out += [bytes(p) for p in enc.encode(frame)]
    return out


def decode(payloads: list[bytes]) -> np.ndarray:
    dec = av.CodecContext.create("libopus", "r")
    dec.sample_rate, dec.format, dec.layout = RATE, "s16", "mono"
    return np.concatenate([f.to_ndarray().ravel() for p in payloads for f in dec.decode(av.Packet(p))])


def rtp(seq: int, data: bytes) -> RtpPacket:
    packet = RtpPacket(payload_type=111, sequence_number=seq % 65536, timestamp=seq * SAMPLES)
    packet._data = data
    return packet


Out = list[tuple[int, bytes | None]]


def run(buffer: JitterBuffer, order: list[int], payloads: list[bytes], first: int = 0) -> Out:
    """Each packet added in ``order`` (indices into ``payloads``): what came out for it."""
    out = []
    for i in order:
        _, frame = buffer.add(rtp(first + i, payloads[i]))
        out.append((i, None if frame is None else frame.data))
    return out


def test_join_opus_decodes_as_the_packets_one_by_one() -> None:
    packets = opus_packets(1.2)
    assert {frame_ms(p[0]) for p in packets} == {20.0} and all(p[0] & 3 == 0 for p in packets)
    start = next(i for i in range(len(packets)) if all(p[0] == packets[i][0] for p in packets[i:i + 48]))
    one_by_one = decode(packets[:start + 48])
    sizes = (1, 2, 3, 6, 4, 5, 6, 6, 6, 2, 4, 3)
    ends = start + np.cumsum(sizes)
    joined = [join_opus(packets[e - k:e]) for e, k in zip(ends, sizes, strict=True)]
    together = decode(packets[:start] + joined)
    assert one_by_one.size == (start + 48) * SAMPLES and np.abs(one_by_one).max() > 2000
    np.testing.assert_array_equal(together, one_by_one)
    big = bytes([packets[start][0]]) + bytes(300)  # a frame size that takes two bytes to write
    assert join_opus([big, packets[start]])[2:4] == bytes([252, 12])
    with pytest.raises(ValueError, match="120 ms"):
        join_opus(packets[start:start + 7])
    with pytest.raises(ValueError, match="single-frame"):
        join_opus([packets[start], join_opus(packets[start + 1:start + 3])])
    with pytest.raises(ValueError, match="one configuration"):
        join_opus([packets[0], packets[start]])


def test_packets_in_order_leave_at_once() -> None:
    packets = opus_packets(0.4)
    out = run(AudioJitterBuffer(), list(range(len(packets))), packets, first=65530)  # through a wrap
    assert [data for _, data in out] == packets
    # aiortc's own holds every packet until 4 more have come
    stock = run(JitterBuffer(capacity=16, prefetch=4), list(range(len(packets))), packets)
    assert [i for i, data in stock if data is not None][0] == 4


def test_a_reordered_packet_is_put_back_in_order() -> None:
    packets = opus_packets(0.4)
    buffer = AudioJitterBuffer(reorder=2)
    out = run(buffer, [0, 1, 3, 2, 4, 6, 7, 5, 8], packets)
    assert out[2] == (3, None) and out[3] == (2, join_opus(packets[2:4]))
    assert out[5] == (6, None) and out[6] == (7, None) and out[7] == (5, join_opus(packets[5:8]))
    assert decode([d for _, d in out if d]).size == 9 * SAMPLES
    assert buffer.skipped == 0 and buffer.held == 0


def test_a_lost_packet_costs_no_lasting_delay() -> None:
    packets = opus_packets(1.0)
    order = [i for i in range(len(packets)) if i not in (10, 30, 31)]
    buffer = AudioJitterBuffer(reorder=2)
    out = dict(run(buffer, order, packets))
    assert out[11] is None and out[12] is None  # waited for 10 while two later ones came
    assert out[13] == join_opus(packets[11:14])
    assert out[33] is None and out[34] == join_opus(packets[32:35])  # two lost: given up once two more came
    assert all(out[i] == packets[i] for i in range(40, len(packets)))  # in step again
    assert buffer.skipped == 3 and buffer.held == 0
    assert run(buffer, [10], packets) == [(10, None)] and buffer.late == 1  # too late: dropped
    # aiortc's own buffer (holding 1) stalls until 16 wait, then stays 13-14 packets behind
    stock = dict(run(JitterBuffer(capacity=16, prefetch=1), order, packets))
    assert stock[25] == packets[11] and stock[45] == packets[32]


def test_a_jump_in_sequence_starts_again() -> None:
    packets = opus_packets(0.2)
    buffer = AudioJitterBuffer(reorder=2)
    assert run(buffer, [0, 1], packets)[1] == (1, packets[1])
    _, frame = buffer.add(rtp(1000, packets[2]))
    assert frame is not None and frame.data == packets[2] and buffer.held == 0
