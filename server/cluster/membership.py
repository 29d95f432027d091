"""The cluster's avatar nodes as the gateway sees them, kept current from Ray and from the nodes.

Every ``poll_s`` the gateway lists Ray's nodes: each live one offering the ``avatar`` resource gets
a node actor (or the one an earlier gateway started), one that left is dropped. Each node is asked
for its report every ``report_s``; a node whose actor died, whose Ray node left, or that has not
answered ``SILENT_REPORTS`` times in a row is lost: its ``lost`` event is set (the control sockets
relayed to it tell their clients ``node_lost``) and the gateway forgets it and its sessions. The
session map is rebuilt from the reports, so a restarted gateway knows every running session again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

import ray

from server.cluster.node import RESOURCE, spawn
from server.front.backends import Backend

log = logging.getLogger(__name__)
START_TIMEOUT_S = 180.0  # a node loads its engine and measures its capacity before it serves
SILENT_REPORTS = 3
RETRY_S = 10.0  # a node whose app failed to start is tried again after this long


class Membership:
    """Every avatar node of the cluster; :meth:`run` keeps the list current until cancelled."""

    def __init__(self, passed: dict[str, Any], loopback_ice: bool = False, poll_s: float = 0.5,
                 report_s: float = 1.0, report_timeout_s: float = 2.0,
                 on_lost: Callable[[Backend, str], None] | None = None) -> None:
        self.passed = passed
        self.secret = secrets.token_urlsafe(32)  # proves the gateway's requests to its nodes (GATEWAY_HEADER)
        self.loopback_ice = loopback_ice
        self.poll_s = poll_s
        self.report_s = report_s
        self.report_timeout_s = report_timeout_s
        self.on_lost = on_lost
        self.nodes: dict[str, Backend] = {}
        self._followers: dict[str, asyncio.Task] = {}
        self._retry_at: dict[str, float] = {}
        self._failed: dict[str, Backend] = {}  # nodes whose app did not start, until they are tried again

    def listing(self) -> list[Backend]:
        """Every node, serving or not (a node whose app did not start shows with its error)."""
        failed = [n for k, n in self._failed.items() if k not in self.nodes]
        return sorted([*self.nodes.values(), *failed], key=lambda n: n.node)

    def alive(self) -> list[Backend]:
        return [n for n in self.nodes.values() if n.alive]

    def holder(self, session_id: str) -> Backend | None:
        return next((n for n in self.nodes.values() if session_id in n.sessions), None)

    async def run(self) -> None:
        try:
            while True:
                try:
                    await self.refresh()
                except Exception:  # the GCS may be briefly unreachable; the next poll tries again
                    log.warning("listing the Ray cluster's nodes failed", exc_info=True)
                await asyncio.sleep(self.poll_s)
        finally:
            for task in self._followers.values():
                task.cancel()
            await asyncio.gather(*self._followers.values(), return_exceptions=True)

    async def refresh(self) -> None:
        listed = await asyncio.to_thread(ray.nodes)
        offering = {n["NodeID"]: n for n in listed if n.get("Alive") and n.get("Resources", {}).get(RESOURCE, 0) > 0}
        for node_id in [k for k in self.nodes if k not in offering]:
            self.lose(self.nodes[node_id], "its Ray node left the cluster")
        self._failed = {k: n for k, n in self._failed.items() if k in offering}
        now = time.monotonic()
        for node_id, listing in offering.items():
            if node_id in self.nodes or self._retry_at.get(node_id, 0.0) > now:
                continue
            node = Backend(node_id, gpus=float(listing["Resources"].get("GPU", 0)))
            self.nodes[node_id] = node
            self._followers[node_id] = asyncio.create_task(self._follow(node), name=f"follow-{node_id[:8]}")

    async def _follow(self, node: Backend) -> None:
        """Start (or find) the node's actor, then take its reports until it is lost."""
        try:
            node.actor = spawn(node.node, node.gpus, self.passed, self.loopback_ice)
            node.address = await asyncio.wait_for(node.actor.start.remote(self.secret), START_TIMEOUT_S)
            log.info("avatar node %s serves at %s", node.node[:12], node.address)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            node.error = _reason(exc)
            log.error("avatar node %s did not start: %s", node.node[:12], node.error)
            self.lose(node, f"its app did not start: {node.error}", retry=True)
            self._failed[node.node] = node
            return
        silent = 0
        while True:
            asked = time.monotonic()
            try:
                report = await asyncio.wait_for(node.actor.report.remote(), self.report_timeout_s)
            except TimeoutError:
                silent += 1
                if silent >= SILENT_REPORTS:
                    self.lose(node, f"it did not answer {silent} reports in a row", retry=True)
                    return
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.lose(node, f"its actor failed: {_reason(exc)}", retry=True)
                return
            silent = 0
            node.update(report, asked)
            node.poke.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(node.poke.wait(), self.report_s)

    def lose(self, node: Backend, reason: str, retry: bool = False) -> None:
        """Forget ``node`` and its sessions; its actor is ended (a new one starts while its Ray node lives)."""
        if self.nodes.get(node.node) is not node:
            return
        del self.nodes[node.node]
        follower = self._followers.pop(node.node, None)
        if follower is not None and follower is not asyncio.current_task():
            follower.cancel()
        if node.actor is not None:
            with contextlib.suppress(Exception):
                ray.kill(node.actor)
        if retry:
            self._retry_at[node.node] = time.monotonic() + RETRY_S
        was_serving = node.alive
        node.alive = False
        node.lost.set()
        if was_serving:
            log.warning("avatar node %s lost (%s): %d sessions end", node.node[:12], reason, len(node.sessions))
            if self.on_lost is not None:
                self.on_lost(node, reason)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[-1] if text else ''}".rstrip(": ")
