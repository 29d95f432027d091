"""The session's one peer connection: a browser subscribed to the broadcast, or a WHIP publisher."""

from __future__ import annotations

from dataclasses import dataclass

from aiortc import MediaStreamTrack, RTCPeerConnection


@dataclass
class PeerSlot:
    pc: RTCPeerConnection | None = None
    tracks: tuple[MediaStreamTrack, ...] = ()  # the peer's subscriptions to the broadcast
    ingest_id: str | None = None  # the WHIP resource, when the peer is a WHIP publisher

    def vacate(self) -> None:
        """Forget the peer: its tracks leave the broadcast, the slot takes the next offer."""
        self.pc = None
        for track in self.tracks:
            track.stop()
        self.tracks = ()
