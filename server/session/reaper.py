"""The reaper: frees sessions whose peer never came, never connected, or went silent."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from server.config import TimingSettings
from server.media.peer import last_rtcp_age, remote_streams
from server.session.session import Session

log = logging.getLogger(__name__)
# A browser sends from 1-3 SSRCs (audio, video, its RTX). aiortc keeps statistics for every SSRC a
# peer sends from and reports them all: a peer inventing SSRCs grows memory and the report.
MAX_REMOTE_STREAMS = 16


class Sessions(Protocol):
    """What the reaper needs of the session manager: the sessions, and a way to close one."""

    @property
    def sessions(self) -> Mapping[str, Session]: ...

    def close_soon(self, session_id: str, reason: str) -> None: ...


class SessionReaper:
    """Checks every session each ``interval_s`` and has the manager close the ones it finds dead."""

    def __init__(self, manager: Sessions, timing: TimingSettings, interval_s: float = 1.0) -> None:
        self._manager = manager
        self._timing = timing
        self._interval_s = interval_s
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="session-reaper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            for sid, session in list(self._manager.sessions.items()):
                try:
                    reason = await self.reason_to_reap(session, time.monotonic())
                except Exception:
                    log.exception("session %s: liveness check failed", sid)
                    reason = "check_failed"
                if reason is not None:
                    log.info("reaping session %s: %s", sid, reason)
                    self._manager.close_soon(sid, reason)

    async def reason_to_reap(self, session: Session, now: float) -> str | None:
        s = self._timing
        if session.closing:  # closed itself (peer gone, engine failed): forget it once done
            return session.close_reason if session.closed else None
        times = session.liveness
        pc = session.pc
        if pc is None:
            # A connected WHEP viewer keeps an agent's session alive, and so does its agent's control
            # socket (whose heartbeat notices a vanished agent): its viewers may come later. Viewers
            # that never connect hold it only as long as a peer may take to connect, counted from the
            # first offer since a viewer last connected (offering again does not restart it).
            if session.viewers_connected or session.control_attached:
                return None
            if session.viewers:
                waiting = now - (times.viewers_waiting_since or now)
                return "connect_timeout" if waiting > s.connect_timeout_s else None
            return "no_offer" if now - times.created_at > s.offer_timeout_s else None
        if pc.connectionState in ("failed", "closed"):
            return f"peer_{pc.connectionState}"
        if pc.connectionState != "connected":
            return "connect_timeout" if now - (times.offered_at or now) > s.connect_timeout_s else None
        if remote_streams(pc) > MAX_REMOTE_STREAMS:
            return "peer_misbehaving"
        heard = times.last_heard_at or now
        age = await last_rtcp_age(pc)
        if age is not None:
            heard = max(heard, now - age)
        return "peer_timeout" if now - heard > s.peer_timeout_s else None
