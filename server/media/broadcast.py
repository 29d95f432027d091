"""One playout, many receivers, one encoding per codec: the session's peer and its WHEP viewers.

The playout sources release each picture and voice packet at its deadline and report it played
(``playback.*`` events, the A/V probe) exactly once, so exactly one pump reads each of them, from
the moment the session's media clock starts whether anyone watches or not. Each release is encoded
once for every codec the receivers negotiated (on the encoder threads, off the event loop), and
every receiver of that codec gets the same packets: aiortc's sender only packetizes a packet its
track returns. A receiver joins its codec's encoding once its answer is made (:meth:`PacketTrack.bind`).

Receivers get packets in a small mailbox of their own, so memory stays bounded and a slow viewer
never holds up the others (unlike aiortc's buffered MediaRelay, which queues without limit). A video
receiver must see every packet from a keyframe on: one that joins, or falls behind and loses its
mailbox, waits for the next keyframe and asks for one; a receiver's own keyframe request (PLI/FIR)
asks too. Forced keyframes are at least :data:`KEYFRAME_GAP_S` apart, so one lossy viewer cannot
flood the others with them; the encoders also make one every few seconds unasked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from functools import partial

import av
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

from server.media.encoder_threads import ENCODERS
from server.media.encoders import Encoder, Media, encoder_for
from server.media.outgoing import MediaSource
from server.media.playout import PlayoutClosed

log = logging.getLogger(__name__)
# Packets a receiver may fall behind by: video 8 frames (320 ms), audio 10 packets (200 ms, so a burst
# of packets released back to back after a late event loop is kept whole).
DEPTH = {"video": 8, "audio": 10}
# Releases that may wait for a busy encoder: a picture skipped costs nothing (the next one is coded
# against the last one encoded), so video keeps only the newest two and stays current; voice all.
WAITING = {"video": 2, "audio": 10}
KEYFRAME_GAP_S = 0.5


class PacketTrack(MediaStreamTrack):
    """One receiver's view of a :class:`FanOut`: its codec's packets in a bounded mailbox of its own."""

    def __init__(self, kind: str, fanout: FanOut) -> None:
        super().__init__()
        self.kind = kind
        self.dropped = 0
        self._fanout: FanOut | None = fanout
        self.encoding: Encoding | None = None
        self._packets: deque[av.Packet | None] = deque()
        self._depth = DEPTH[kind]
        self._wait_keyframe = kind == "video"
        self._resync = False
        self._ready = asyncio.Event()

    def bind(self, codec: RTCRtpCodecParameters) -> None:
        """Start receiving ``codec``'s packets (the codec its sender negotiated)."""
        if self._fanout is not None:
            self._fanout.attach(self, codec)

    def request_keyframe(self) -> None:
        """The receiver cannot decode (PLI/FIR): its codec's next picture is made a keyframe."""
        if self.encoding is not None:
            self.encoding.request_keyframe()

    def offer(self, packets: list[av.Packet]) -> None:
        """Called with each release's packets; a video receiver skips to a keyframe after a gap."""
        for packet in packets:
            if self._wait_keyframe and not packet.is_keyframe:
                self.dropped += 1
                continue
            self._wait_keyframe = False
            if len(self._packets) >= self._depth:
                if self.kind == "audio":
                    self._packets.popleft()
                    self.dropped += 1
                else:
                    self._lost_sync(1 + len(self._packets))
                    continue
            self._packets.append(packet)
        self._ready.set()

    def end(self) -> None:
        """No more packets: the track ends once those before are read."""
        self._packets.append(None)
        self._ready.set()

    def _lost_sync(self, dropped: int) -> None:
        """Asks for a keyframe only once read again: a track nobody reads must not force keyframes on all."""
        self.dropped += dropped
        self._packets.clear()
        self._wait_keyframe = self._resync = True

    async def recv(self) -> av.Packet:
        if self._resync:
            self._resync = False
            self.request_keyframe()
        while not self._packets:
            if self.readyState != "live":
                raise MediaStreamError
            self._ready.clear()
            await self._ready.wait()
        packet = self._packets.popleft()
        if packet is None:
            self.stop()
            raise MediaStreamError
        return packet

    def stop(self) -> None:
        super().stop()
        if self._fanout is not None:
            self._fanout.unsubscribe(self)
            self._fanout = None
        self._ready.set()


class Encoding:
    """One codec's encoder and its receivers. Releases wait (at most ``depth``) while it is busy
    encoding earlier ones on an encoder thread; then all that waited go in one call."""

    def __init__(self, encoder: Encoder, depth: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.tracks: set[PacketTrack] = set()
        self.skipped = 0  # releases never encoded: the encoder fell behind by more than ``depth``
        self.failures = 0  # encodes that raised: their releases go to nobody
        self._encoder = encoder
        self._waiting: deque[Media] = deque()
        self._depth = depth
        self._busy = False
        self._closed = self._finishing = False
        self._clock = clock
        self._keyframe_wanted = False
        self._last_forced = float("-inf")

    def request_keyframe(self) -> None:
        self._keyframe_wanted = True

    def push(self, media: Media) -> None:
        if len(self._waiting) >= self._depth:
            self._waiting.popleft()
            self.skipped += 1
        self._waiting.append(media)
        if not self._busy:
            self._submit()

    def close(self) -> None:
        """No receiver is left: nothing more is encoded or handed out."""
        self._closed = True
        self._waiting.clear()

    def finish(self) -> None:
        """The source ended: what is being encoded or waits is handed out, then every receiver ends."""
        self._finishing = True
        if not self._busy:
            self._end()

    def _end(self) -> None:
        self._closed = True
        for track in list(self.tracks):
            track.end()

    def _keyframe(self) -> bool:
        now = self._clock()
        if not self._keyframe_wanted or now - self._last_forced < KEYFRAME_GAP_S:
            return False
        self._keyframe_wanted, self._last_forced = False, now
        return True

    def _submit(self) -> None:
        batch = list(self._waiting)
        self._waiting.clear()
        self._busy = True
        ENCODERS.submit(partial(self._encoder.encode, batch, self._keyframe()), self._encoded)

    def _encoded(self, packets: list[av.Packet] | None, error: BaseException | None) -> None:
        self._busy = False
        if self._closed:
            return
        if error is not None:
            self.failures += 1
            if self.failures == 1:  # the same error would follow at every picture
                log.error("encoding failed (later failures of this encoder are counted, not logged)", exc_info=error)
        else:
            if any(p.is_keyframe for p in packets):  # it answers every request made before it came back
                self._keyframe_wanted = False
            for track in list(self.tracks):
                track.offer(packets)
        if self._waiting:
            self._submit()
        elif self._finishing:
            self._end()


class FanOut:
    """Pumps one source and hands every release to the encoding of each codec its receivers use."""

    def __init__(self, source: MediaSource, fps: int, sample_rate: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kind = source.kind
        self.frames = 0
        self._source = source
        self._fps, self._rate = fps, sample_rate
        self._clock = clock
        self._subscribers: set[PacketTrack] = set()
        self._encodings: dict[str, Encoding] = {}
        self._ended = False

    def subscribe(self) -> PacketTrack:
        track = PacketTrack(self.kind, self)
        if self._ended:
            track.end()
        else:
            self._subscribers.add(track)
        return track

    def attach(self, track: PacketTrack, codec: RTCRtpCodecParameters) -> None:
        """``track`` receives ``codec``'s packets from the next keyframe on (asked for now); once."""
        if track not in self._subscribers or track.encoding is not None:
            return
        mime = codec.mimeType.lower()
        encoding = self._encodings.get(mime)
        if encoding is None:
            encoding = self._encodings[mime] = Encoding(encoder_for(codec, self._fps, self._rate), WAITING[self.kind],
                                                        self._clock)
        encoding.tracks.add(track)
        track.encoding = encoding
        track.request_keyframe()

    def unsubscribe(self, track: PacketTrack) -> None:
        self._subscribers.discard(track)
        encoding, track.encoding = track.encoding, None
        if encoding is None:
            return
        encoding.tracks.discard(track)
        if not encoding.tracks:
            encoding.close()
            self._encodings = {mime: e for mime, e in self._encodings.items() if e is not encoding}

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    @property
    def codecs(self) -> list[str]:
        """The codecs being encoded (one encoding each)."""
        return list(self._encodings)

    async def run(self) -> None:
        """Pump until the source ends (the playout closed), then end every subscriber after the packets
        of what was released."""
        try:
            while True:
                try:
                    media = await self._source.next()
                except PlayoutClosed:
                    return
                self.frames += 1
                for encoding in self._encodings.values():
                    encoding.push(media)
        finally:
            self._ended = True
            for track in self._subscribers:
                if track.encoding is None:
                    track.end()
            for encoding in self._encodings.values():
                encoding.finish()
            self._encodings.clear()
            self._subscribers.clear()


class Broadcast:
    """The session's outgoing video and voice, for any number of peers."""

    def __init__(self, video: MediaSource, audio: MediaSource, fps: int, sample_rate: int) -> None:
        self.video = FanOut(video, fps, sample_rate)
        self.audio = FanOut(audio, fps, sample_rate)

    def subscribe(self) -> tuple[PacketTrack, PacketTrack]:
        """A (video, audio) pair of tracks for one more peer; each joins its encoding once bound."""
        return self.video.subscribe(), self.audio.subscribe()

    async def run(self) -> None:
        """Both pumps; started with the session's media clock, ended by closing the playout."""
        await asyncio.gather(self.video.run(), self.audio.run())
