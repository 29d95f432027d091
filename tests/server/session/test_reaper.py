"""The reaper's verdicts on a fake clock: the offer timeout that frees a hoarded slot (10 s by
default), and a peer sending from more SSRCs than any real client."""

from __future__ import annotations

from types import SimpleNamespace

from server.config import Settings, TimingSettings
from server.session.reaper import MAX_REMOTE_STREAMS, SessionReaper


def session(pc=None, created_at: float = 100.0, waiting: int = 0, connected: int = 0) -> SimpleNamespace:
    """What the reaper reads of a session: its instants, its peer, and its WHEP viewers (``waiting``
    to connect and ``connected``)."""
    times = SimpleNamespace(created_at=created_at, offered_at=created_at, last_heard_at=created_at,
                            viewers_waiting_since=created_at)
    return SimpleNamespace(closing=False, closed=False, liveness=times, pc=pc, viewers=waiting + connected,
                           viewers_connected=connected > 0, control_attached=False)


class Receiver:
    def __init__(self, sources: int) -> None:
        self.sources = sources

    def getSynchronizationSources(self) -> list[int]:
        return list(range(self.sources))


class Peer:
    connectionState = "connected"

    def __init__(self, *sources: int) -> None:
        self.receivers = [Receiver(n) for n in sources]

    def getReceivers(self) -> list[Receiver]:
        return self.receivers

    def getSenders(self) -> list:
        return []


async def test_a_session_without_an_offer_frees_its_slot_after_ten_seconds():
    assert Settings().timing.offer_timeout_s == 10.0
    reaper = SessionReaper(None, TimingSettings())
    assert await reaper.reason_to_reap(session(), now=109.9) is None
    assert await reaper.reason_to_reap(session(), now=110.1) == "no_offer"
    short = SessionReaper(None, TimingSettings(offer_timeout_s=2.0))
    assert await short.reason_to_reap(session(), now=102.5) == "no_offer"


async def test_an_agent_holding_the_control_socket_keeps_a_session_without_a_peer():
    """An agent's session streams to viewers that may come later; its control socket holds it,
    and once the socket is gone the offer timeout (long past) frees it at the next check."""
    reaper = SessionReaper(None, TimingSettings())
    held = session()
    held.control_attached = True
    assert await reaper.reason_to_reap(held, now=400.0) is None
    held.control_attached = False
    assert await reaper.reason_to_reap(held, now=401.0) == "no_offer"


async def test_viewers_that_never_connect_hold_a_session_only_for_the_connect_timeout():
    reaper = SessionReaper(None, TimingSettings(connect_timeout_s=8.0))
    assert await reaper.reason_to_reap(session(waiting=1), now=107.9) is None
    assert await reaper.reason_to_reap(session(waiting=2), now=108.1) == "connect_timeout"
    assert await reaper.reason_to_reap(session(waiting=1, connected=1), now=400.0) is None


async def test_a_peer_sending_from_too_many_ssrcs_is_reaped():
    reaper = SessionReaper(None, TimingSettings())
    assert await reaper.reason_to_reap(session(Peer(1, 2)), now=101.0) is None  # audio, video and its RTX
    flood = Peer(1, MAX_REMOTE_STREAMS)
    assert await reaper.reason_to_reap(session(flood), now=101.0) == "peer_misbehaving"
