"""The WHEP viewers of one session: read-only peers that get the avatar's video and voice.

Each viewer is its own peer connection fed from the session's :class:`~server.media.broadcast.Broadcast`;
whatever a viewer sends (a sendrecv offer) is read and dropped, so aiortc's receive queues stay
empty. A viewer whose connection fails or closes is forgotten; closing the session closes them all.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription

from server.base.protocol import IceServer
from server.media.broadcast import Broadcast, PacketTrack
from server.media.microphone import consume_microphone
from server.media.peer import answer, close_peer, create_peer


class TooManyViewers(Exception):
    """The session has as many viewers as it takes."""


@dataclass
class Viewer:
    id: str
    pc: RTCPeerConnection
    tracks: tuple[PacketTrack, PacketTrack]
    tasks: set[asyncio.Task] = field(default_factory=set)


class Viewers:
    def __init__(
        self,
        broadcast: Broadcast,
        ice_servers: list[IceServer],
        sample_rate: int,
        on_connected: Callable[[], None],
        limit: int,
    ) -> None:
        self._broadcast = broadcast
        self.limit = limit
        self._ice_servers = ice_servers
        self._sample_rate = sample_rate
        self._on_connected = on_connected
        self._viewers: dict[str, Viewer] = {}
        self._adding = 0  # offers being answered: they hold a place from the check on
        self._leaving: set[asyncio.Task] = set()

    def __len__(self) -> int:
        return len(self._viewers)

    @property
    def connected(self) -> int:
        """Viewers whose connection is up."""
        return sum(1 for v in self._viewers.values() if v.pc.connectionState == "connected")

    def get(self, viewer_id: str) -> Viewer | None:
        return self._viewers.get(viewer_id)

    async def add(self, offer: RTCSessionDescription) -> tuple[str, RTCSessionDescription]:
        """Answer a viewer's offer (raises :class:`~server.media.peer.BadOffer`, or :class:`TooManyViewers`
        when ``limit`` viewers are there or being answered); its id and our answer. The place is taken
        before the first await, so parallel offers cannot all pass the check."""
        if len(self._viewers) + self._adding >= self.limit:
            raise TooManyViewers(f"this session has its {self.limit} viewers")
        self._adding += 1
        try:
            return await self._add(offer)
        finally:
            self._adding -= 1

    async def _add(self, offer: RTCSessionDescription) -> tuple[str, RTCSessionDescription]:
        pc = create_peer(self._ice_servers)
        viewer = Viewer(secrets.token_urlsafe(12), pc, self._broadcast.subscribe())
        pc.on("track", lambda track: self._drain(viewer, track))
        pc.on("connectionstatechange", lambda: self._on_state(viewer))
        try:
            description = await answer(pc, offer, *viewer.tracks)
        except BaseException:
            await self._close(viewer)
            raise
        self._viewers[viewer.id] = viewer
        return viewer.id, description

    async def remove(self, viewer_id: str) -> bool:
        viewer = self._viewers.pop(viewer_id, None)
        if viewer is None:
            return False
        await self._close(viewer)
        return True

    async def close(self) -> None:
        viewers, self._viewers = list(self._viewers.values()), {}
        await asyncio.gather(*(self._close(v) for v in viewers))

    def _drain(self, viewer: Viewer, track: MediaStreamTrack) -> None:
        task = asyncio.create_task(consume_microphone(track, self._sample_rate, lambda _: None))
        viewer.tasks.add(task)
        task.add_done_callback(viewer.tasks.discard)

    def _on_state(self, viewer: Viewer) -> None:
        state = viewer.pc.connectionState
        if state == "connected":
            self._on_connected()
        elif state in ("failed", "closed") and self._viewers.get(viewer.id) is viewer:
            task = asyncio.create_task(self.remove(viewer.id))
            self._leaving.add(task)
            task.add_done_callback(self._leaving.discard)

    @staticmethod
    async def _close(viewer: Viewer) -> None:
        for track in viewer.tracks:
            track.stop()
        for task in list(viewer.tasks):
            task.cancel()
        await close_peer(viewer.pc)  # bounded, sockets freed even when aiortc hangs or raises
        await asyncio.gather(*viewer.tasks, return_exceptions=True)
