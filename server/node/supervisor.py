"""The node's processes: its engine workers, started once and shared, and its web processes.

The node owns the engine workers (a ``WorkerPool`` of its own, which restarts a worker that dies
and kills one that stops making progress); each worker also listens on a local socket in the
node's run folder, where the web processes connect with the node's key. The web processes are
spawned with the node's settings, each on a loopback port of its own and its own share of the
UDP ports; one that dies costs only its own sessions, and a new one takes its place.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import secrets
import shutil
import socket
import tempfile
from dataclasses import dataclass

from server.api.engine_setup import WorkerPool, worker_options
from server.config import Settings
from server.node import web_process
from server.node.members import WebProcesses

log = logging.getLogger(__name__)
RESTART_DELAY_S = 1.0
STOP_TIMEOUT_S = 5.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_share(ports: tuple[int, int] | None, index: int, count: int) -> tuple[int, int] | None:
    """Web process ``index``'s part of the node's UDP port range (None: any free port)."""
    if ports is None:
        return None
    low, high = ports
    size = (high - low + 1) // count
    if size < 1:
        raise ValueError(f"UDP ports {low}-{high} cannot be shared by {count} web processes")
    return low + index * size, low + (index + 1) * size - 1


@dataclass
class WebProcess:
    index: int
    name: str
    process: multiprocessing.process.BaseProcess
    address: str


class NodeSupervisor:
    """Starts, watches and stops the node's engine workers and web processes."""

    def __init__(self, settings: Settings, members: WebProcesses, log_level: str = "warning") -> None:
        self.settings = settings
        self.members = members
        self.log_level = log_level
        self.pool: WorkerPool | None = None
        self.processes: dict[int, WebProcess] = {}
        self._run_dir: str | None = None
        self._key = secrets.token_bytes(32)
        self._closing = False
        self._restarts: set[asyncio.Task] = set()

    def pid(self, name: str) -> int | None:
        return next((w.process.pid for w in self.processes.values() if w.name == name), None)

    async def start(self) -> None:
        self._run_dir = tempfile.mkdtemp(prefix="avatar-node-")
        options = dataclasses.replace(worker_options(self.settings), socket_dir=self._run_dir, key=self._key)
        self.pool = WorkerPool(options, workers=self.settings.engine.engine_workers)
        await self.pool.start()
        for index in range(self.settings.node.web_processes):
            self._spawn(index)

    def _web_settings(self, index: int, port: int) -> Settings:
        s = self.settings
        return s.replace(
            host="127.0.0.1", port=port, engine="node", engine_workers=len(self.pool.links), web_processes=1,
            node_sockets=self._run_dir, node_key=self._key.hex(),
            ice_ports=port_share(s.network.ice_ports, index, s.node.web_processes),
        )

    def _spawn(self, index: int) -> None:
        port = free_port()
        name = f"web-{index}"
        ctx = multiprocessing.get_context("spawn")
        process = ctx.Process(target=web_process.run, name=f"avatar-{name}", daemon=True,
                              args=(self._web_settings(index, port), name, self.members.secret, self.log_level,
                                    web_process.HOST_ADDRESSES))
        process.start()
        web = self.processes[index] = WebProcess(index, name, process, f"http://127.0.0.1:{port}")
        self.members.add(name, web.address)
        asyncio.get_running_loop().add_reader(process.sentinel, self._ended, web)
        log.info("web process %s (pid %s) at %s", name, process.pid, web.address)

    def _ended(self, web: WebProcess) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(web.process.sentinel)
        web.process.join(0)
        self.members.lose(web.name, f"its process exited with {web.process.exitcode}")
        if self._closing:
            return
        log.error("web process %s (pid %s) exited with %s: starting another", web.name, web.process.pid,
                  web.process.exitcode)
        task = loop.create_task(self._restart(web.index))
        self._restarts.add(task)
        task.add_done_callback(self._restarts.discard)

    async def _restart(self, index: int) -> None:
        await asyncio.sleep(RESTART_DELAY_S)
        if not self._closing:
            self._spawn(index)

    async def stop(self) -> None:
        self._closing = True
        for task in list(self._restarts):
            task.cancel()
        loop = asyncio.get_running_loop()
        for web in self.processes.values():
            with contextlib.suppress(Exception):
                loop.remove_reader(web.process.sentinel)
            if web.process.is_alive():
                web.process.terminate()
        for web in self.processes.values():
            await asyncio.to_thread(web.process.join, STOP_TIMEOUT_S)
            if web.process.is_alive():
                web.process.kill()
        if self.pool is not None:
            await self.pool.close()
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
