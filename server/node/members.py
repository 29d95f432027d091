"""The node's web processes as its front sees them, kept current from their reports.

Each web process is asked for its report (``GET /v1/node/report`` with the front's secret) every
``report_s``; one whose process ended, or that has not answered ``SILENT_REPORTS`` times in a
row (its first within ``START_TIMEOUT_S``), is lost: its ``lost`` event is set (the control
sockets relayed to it tell their clients) and the front forgets it and its sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time

import httpx

from server.api.forwarded import GATEWAY_HEADER
from server.api.report import REPORT_PATH, NodeReport
from server.front.backends import Backend

log = logging.getLogger(__name__)
SILENT_REPORTS = 3
START_TIMEOUT_S = 120.0  # a web process's first report: it imports, then connects to the engine workers


class WebProcesses:
    """The front's :class:`~server.front.backends.Members`: the node's web processes."""

    def __init__(self, report_s: float = 0.5, report_timeout_s: float = 2.0) -> None:
        self.secret = secrets.token_urlsafe(32)
        self.report_s = report_s
        self.report_timeout_s = report_timeout_s
        self.nodes: dict[str, Backend] = {}
        self._known: dict[str, Backend] = {}
        self._followers: dict[str, asyncio.Task] = {}
        self._http: httpx.AsyncClient | None = None

    def listing(self) -> list[Backend]:
        return sorted(self._known.values(), key=lambda b: b.node)

    def holder(self, session_id: str) -> Backend | None:
        return next((b for b in self.nodes.values() if session_id in b.sessions), None)

    def add(self, name: str, address: str) -> Backend:
        """A web process that answers at ``address``; it serves once its first report says so."""
        backend = Backend(name, address=address)
        self._known[name] = self.nodes[name] = backend
        if self._http is not None:
            self._follow_soon(backend)
        return backend

    def lose(self, name: str, reason: str) -> None:
        """Forget the web process ``name`` and its sessions."""
        backend = self.nodes.pop(name, None)
        if backend is None:
            return
        follower = self._followers.pop(name, None)
        if follower is not None and follower is not asyncio.current_task():
            follower.cancel()
        was_serving = backend.alive
        backend.alive = False
        backend.error = reason
        backend.lost.set()
        if was_serving:
            log.warning("web process %s lost (%s): %d sessions end", name, reason, len(backend.sessions))

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=self.report_timeout_s, headers={GATEWAY_HEADER: self.secret}) as http:
            self._http = http
            for backend in self.nodes.values():
                self._follow_soon(backend)
            try:
                await asyncio.Event().wait()
            finally:
                self._http = None
                for task in self._followers.values():
                    task.cancel()
                await asyncio.gather(*self._followers.values(), return_exceptions=True)

    def _follow_soon(self, backend: Backend) -> None:
        self._followers[backend.node] = asyncio.create_task(self._follow(backend), name=f"follow-{backend.node}")

    async def _follow(self, backend: Backend) -> None:
        """Ask ``backend`` for its reports while it is the web process of its name: a follower whose
        process was replaced (a cancellation lost in ``wait_for``'s race, before Python 3.12) stops
        rather than lose the new process under the same name."""
        silent = 0
        started = time.monotonic()
        while self.nodes.get(backend.node) is backend:
            asked = time.monotonic()
            try:
                answer = await self._http.get(backend.address + REPORT_PATH)
                answer.raise_for_status()
                said = answer.json()
                report = NodeReport(**{**said, "sessions": tuple(said["sessions"]), "node": backend.node,
                                       "address": backend.address})
            except (httpx.HTTPError, ValueError, TypeError) as exc:
                silent += 1 if backend.reports or time.monotonic() - started > START_TIMEOUT_S else 0
                if silent >= SILENT_REPORTS:
                    if self.nodes.get(backend.node) is backend:
                        self.lose(backend.node,
                                  f"it did not answer {silent} reports in a row ({exc.__class__.__name__})")
                    return
                await asyncio.sleep(self.report_s)
                continue
            silent = 0
            backend.update(report, asked)
            backend.poke.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(backend.poke.wait(), self.report_s)

