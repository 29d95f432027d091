"""The microphone's receive jitter buffer: packets out as soon as they are in order, a missing one
waited for briefly, and no lasting delay after a loss.

aiortc's audio buffer lets a packet out only once later packets have arrived (4 by default: 80 ms
of microphone delay), and one lost packet stalls it until 16 are waiting; from then on it lets one
packet out per packet in, so the microphone stays 280 ms late for the rest of the call. Here a
packet leaves the moment the packets before it have; a missing one is waited for until ``reorder``
later packets are in (room to put reordered packets back in order), then given up. What waited
behind it leaves at once, repacked as one Opus packet of several frames (RFC 6716, code 3), since
the receiver hands on one frame per packet received: the buffer is empty again after every loss.
"""

from __future__ import annotations

from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.rtp import RtpPacket
from aiortc.utils import uint16_add

__all__ = ["AudioJitterBuffer", "frame_ms", "join_opus"]
MAX_PACKET_MS = 120.0  # the longest Opus packet
MAX_FRAME_BYTES = 1275
HALF_RANGE = 0x8000  # sequence numbers this far behind the next due are late, not ahead


def frame_ms(toc: int) -> float:
    """Duration of one frame of an Opus packet with this TOC byte (RFC 6716, table 2)."""
    config = toc >> 3
    if config < 12:  # SILK
        return (10.0, 20.0, 40.0, 60.0)[config % 4]
    if config < 16:  # hybrid
        return (10.0, 20.0)[config % 2]
    return (2.5, 5.0, 10.0, 20.0)[config % 4]  # CELT


def _single_frame(data: bytes) -> bool:
    return 1 <= len(data) <= MAX_FRAME_BYTES + 1 and data[0] & 0x3 == 0


def join_opus(packets: list[bytes]) -> bytes:
    """One Opus packet holding the frames of ``packets``: single-frame packets (code 0) of one
    configuration, together at most 120 ms. Their frames decode exactly as they would have one
    packet at a time."""
    if len(packets) == 1:
        return packets[0]
    toc = packets[0][0]
    if not all(_single_frame(p) and p[0] == toc for p in packets):
        raise ValueError("only single-frame Opus packets of one configuration join")
    if len(packets) * frame_ms(toc) > MAX_PACKET_MS:
        raise ValueError(f"{len(packets)} frames of {frame_ms(toc)} ms exceed an Opus packet's 120 ms")
    out = bytearray([(toc & 0xFC) | 0x3, 0x80 | len(packets)])  # code 3, variable sizes, frame count
    for p in packets[:-1]:  # every frame's size but the last's
        size = len(p) - 1
        if size < 252:
            out.append(size)
        else:
            first = 252 + (size & 0x3)
            out += bytes([first, (size - first) >> 2])
    for p in packets:
        out += p[1:]
    return bytes(out)


class AudioJitterBuffer(JitterBuffer):
    """Drop-in for the audio receiver's ``JitterBuffer``: :meth:`add` takes each RTP packet and
    returns what may be decoded now."""

    def __init__(self, capacity: int = 16, reorder: int = 2) -> None:
        super().__init__(capacity=capacity)
        self.reorder = reorder  # later packets in before a missing one is given up
        self.skipped = 0  # packets given up (lost, or later than ``reorder`` others)
        self.late = 0  # packets that came after they were given up, dropped
        self._next: int | None = None  # sequence number due next
        self._waiting: dict[int, RtpPacket] = {}

    @property
    def held(self) -> int:
        """Packets waiting for a missing one before them."""
        return len(self._waiting)

    def add(self, packet: RtpPacket) -> tuple[bool, JitterFrame | None]:
        seq = packet.sequence_number
        if self._next is None:
            self._next = seq
        ahead = uint16_add(seq, -self._next)
        if ahead >= HALF_RANGE:
            self.late += 1
            return False, None
        if ahead >= self.capacity:  # a long outage or a new sequence: start again from here
            self.skipped += ahead
            self._waiting.clear()
            self._next = seq
        self._waiting[seq] = packet
        if self._next not in self._waiting:
            if len(self._waiting) <= self.reorder:
                return False, None
            first = min(self._waiting, key=lambda s: uint16_add(s, -self._next))
            self.skipped += uint16_add(first, -self._next)
            self._next = first
        return False, self._take()

    def _take(self) -> JitterFrame:
        """The packets now in order from the next due, as one frame (as many as join)."""
        first = self._waiting.pop(self._next)
        run = [first._data]
        self._next = uint16_add(self._next, 1)
        if _single_frame(first._data):
            most = int(MAX_PACKET_MS // frame_ms(first._data[0]))
            while self._next in self._waiting and len(run) < most:
                data = self._waiting[self._next]._data
                if not (_single_frame(data) and data[0] == first._data[0]):
                    break
                run.append(self._waiting.pop(self._next)._data)
                self._next = uint16_add(self._next, 1)
        return JitterFrame(data=join_opus(run), timestamp=first.timestamp)
