"""One playout, many receivers: the session's peer and its WHEP viewers see the same frames.

The playout tracks release each frame at its deadline and report it played (``playback.*``
events, the A/V probe) exactly once, so exactly one pump reads each of them, from the moment the
session's media clock starts whether anyone watches or not. Every subscriber gets the frames in a
small mailbox of its own, each frame an object of its own (aiortc encodes in worker threads, and
PyAV frames are not safe to convert from two threads at once). A subscriber that falls behind loses
its oldest frames, so memory stays bounded and a slow viewer never holds up the others (unlike
aiortc's buffered MediaRelay, which queues without limit).
"""

from __future__ import annotations

import asyncio
from collections import deque

import av
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

# Frames a subscriber may fall behind by: video 2 frames (80 ms at 25 fps), audio 10 packets (200 ms,
# so a burst of packets released back to back after a late event loop is kept whole).
DEPTH = {"video": 2, "audio": 10}
Frame = av.VideoFrame | av.AudioFrame


def copy_frame(frame: Frame) -> Frame:
    """The same picture or samples, with the same timestamps, in a new frame."""
    if isinstance(frame, av.VideoFrame):
        out = av.VideoFrame.from_ndarray(frame.to_ndarray(), format=frame.format.name)
    else:
        out = av.AudioFrame.from_ndarray(frame.to_ndarray(), format=frame.format.name, layout=frame.layout.name)
        out.sample_rate = frame.sample_rate
    out.pts, out.time_base = frame.pts, frame.time_base
    return out


class FanOutTrack(MediaStreamTrack):
    """One subscriber's view of a :class:`FanOut`: its own bounded mailbox of frames."""

    def __init__(self, kind: str, depth: int, fanout: FanOut) -> None:
        super().__init__()
        self.kind = kind
        self.dropped = 0
        self._fanout: FanOut | None = fanout
        self._frames: deque[Frame | None] = deque(maxlen=depth)
        self._ready = asyncio.Event()

    def offer(self, frame: Frame | None) -> None:
        """Called by the pump; ``None`` ends the track once the frames before it are read."""
        if frame is not None and len(self._frames) == self._frames.maxlen:
            self.dropped += 1
        self._frames.append(frame)
        self._ready.set()

    async def recv(self) -> Frame:
        while not self._frames:
            if self.readyState != "live":
                raise MediaStreamError
            self._ready.clear()
            await self._ready.wait()
        frame = self._frames.popleft()
        if frame is None:
            self.stop()
            raise MediaStreamError
        return frame

    def stop(self) -> None:
        super().stop()
        if self._fanout is not None:
            self._fanout.unsubscribe(self)
            self._fanout = None
        self._ready.set()


class FanOut:
    """Reads one source track and hands every frame to all current subscribers."""

    def __init__(self, source: MediaStreamTrack) -> None:
        self.kind = source.kind
        self.frames = 0
        self._source = source
        self._subscribers: set[FanOutTrack] = set()
        self._ended = False

    def subscribe(self) -> FanOutTrack:
        track = FanOutTrack(self.kind, DEPTH[self.kind], self)
        if self._ended:
            track.offer(None)
        else:
            self._subscribers.add(track)
        return track

    def unsubscribe(self, track: FanOutTrack) -> None:
        self._subscribers.discard(track)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    async def run(self) -> None:
        """Pump until the source ends (the playout closed), then end every subscriber."""
        try:
            while True:
                try:
                    frame = await self._source.recv()
                except MediaStreamError:
                    return
                self.frames += 1
                for i, track in enumerate(list(self._subscribers)):
                    track.offer(frame if i == 0 else copy_frame(frame))
        finally:
            self._ended = True
            for track in list(self._subscribers):
                track.offer(None)
            self._subscribers.clear()


class Broadcast:
    """The session's outgoing video and voice, for any number of peers."""

    def __init__(self, video: MediaStreamTrack, audio: MediaStreamTrack) -> None:
        self.video = FanOut(video)
        self.audio = FanOut(audio)

    def subscribe(self) -> tuple[FanOutTrack, FanOutTrack]:
        """A (video, audio) pair of tracks for one more peer."""
        return self.video.subscribe(), self.audio.subscribe()

    async def run(self) -> None:
        """Both pumps; started with the session's media clock, ended by closing the playout."""
        await asyncio.gather(self.video.run(), self.audio.run())
