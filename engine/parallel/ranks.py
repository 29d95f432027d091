"""The ranks of one engine: rank 0 is the process that serves (the engine worker, or
``avatar bench``); it starts the others as subprocesses of its own, joins them in one
``torch.distributed`` process group (gloo on CPU, NCCL on CUDA) over a free loopback port,
and ends them with it.

Commands reach the other ranks over a socket pair each (``engine.parallel.mirror``), tensors
inside the DiT over the process group. Either side notices the other's end: a rank whose
parent is gone reads end-of-file on its socket (or fails its next collective) and exits; rank
0 sees a rank's process exit, its socket close or a collective fail, stops every other rank
and raises ``RanksLost`` — in the engine worker, the worker then ends and its sessions get
``engine_lost``.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import pickle
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import torch.distributed as dist

from engine.parallel.mirror import Command, Stop
from engine.parallel.plan import ParallelPlan

LOOPBACK = "127.0.0.1"


class RanksLost(RuntimeError):
    """A rank ended or a collective failed: the engine spread over these ranks cannot go on."""


@dataclass(frozen=True)
class RankSpec:
    """What every rank builds its share of the engine from (picklable)."""

    plan: ParallelPlan
    build: dict = field(default_factory=dict)  # Pipeline.from_config keywords, device aside
    devices: tuple[str, ...] = ("cpu",)
    timeout_s: float = 120.0  # for any one collective, and for a rank to start

    @property
    def world_size(self) -> int:
        return self.plan.world_size

    @property
    def backend(self) -> str:
        return "nccl" if self.devices[0].startswith("cuda") else "gloo"


@dataclass(frozen=True)
class Hello:
    rank: int
    pid: int


@dataclass(frozen=True)
class Ready:
    rank: int


@dataclass(frozen=True)
class Failed:
    rank: int
    message: str


def send(conn: Connection, obj: object) -> None:
    """Plain pickling: tensors travel by value (a connection's own pickler would pass them as
    shared-memory handles, which only a process's own children can open)."""
    conn.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def receive(conn: Connection) -> object:
    return pickle.loads(conn.recv_bytes())


def join_group(spec: RankSpec, rank: int, store: dist.TCPStore) -> None:
    """This process's place in the engine's process group."""
    if spec.backend == "nccl":
        import torch

        torch.cuda.set_device(spec.devices[rank])
    dist.init_process_group(spec.backend, store=store, rank=rank, world_size=spec.world_size,
                            timeout=datetime.timedelta(seconds=spec.timeout_s))


def leave_group() -> None:
    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


class RankGroup:
    """Rank 0's side of the group: the other ranks' processes and sockets."""

    def __init__(self, spec: RankSpec) -> None:
        if dist.is_initialized():
            raise RuntimeError("this process already belongs to a process group")
        self.spec = spec
        self.lost: str | None = None
        self.closed = False
        self.procs: list[subprocess.Popen] = []
        self.conns: list[Connection] = []
        self.pids: list[int] = []
        self.store = dist.TCPStore(LOOPBACK, 0, spec.world_size, True, wait_for_workers=False,
                                   timeout=datetime.timedelta(seconds=spec.timeout_s))
        try:
            for rank in range(1, spec.world_size):
                self._spawn(rank)
            self.pids = [self._expect(i, Hello).pid for i in range(len(self.procs))]
            join_group(spec, 0, self.store)
        except BaseException:
            self.abort("the ranks could not start")
            raise

    def _spawn(self, rank: int) -> None:
        ours, theirs = socket.socketpair()
        env = {**os.environ, "MASTER_ADDR": LOOPBACK, "MASTER_PORT": str(self.store.port), "RANK": str(rank),
               "WORLD_SIZE": str(self.spec.world_size), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = subprocess.Popen([sys.executable, "-m", "engine.parallel.follower", str(theirs.fileno())],
                                pass_fds=(theirs.fileno(),), env=env)
        theirs.close()
        conn = Connection(ours.detach())
        self.procs.append(proc)
        self.conns.append(conn)
        send(conn, (self.spec, rank))

    def _expect(self, i: int, kind: type | None = None, timeout_s: float | None = None) -> object:
        """The next message of follower ``i`` (rank i + 1); a rank that fails, exits or stays
        silent past the timeout loses the group."""
        conn, proc = self.conns[i], self.procs[i]
        deadline = time.monotonic() + (timeout_s or self.spec.timeout_s)
        while True:
            try:
                if conn.poll(0.05):
                    msg = receive(conn)
                    if isinstance(msg, Failed):
                        raise self.lose(f"rank {msg.rank} failed: {msg.message}")
                    if kind is not None and not isinstance(msg, kind):
                        raise self.lose(f"rank {i + 1} sent {type(msg).__name__}, expected {kind.__name__}")
                    return msg
            except (EOFError, OSError):
                raise self.lose(f"rank {i + 1} closed its connection") from None
            if proc.poll() is not None:
                raise self.lose(f"rank {i + 1} exited with status {proc.returncode}")
            if time.monotonic() > deadline:
                raise self.lose(f"rank {i + 1} did not answer within {timeout_s or self.spec.timeout_s:.0f} s")

    def ready(self) -> None:
        """Wait until every other rank has built its share of the engine."""
        for i in range(len(self.procs)):
            self._expect(i, Ready)

    # ---- the mirror's channel -------------------------------------------------------------

    def send(self, commands: list[Command]) -> None:
        self.check()
        for i, conn in enumerate(self.conns):
            try:
                send(conn, commands)
            except (OSError, ValueError):
                raise self.lose(f"rank {i + 1} is gone") from None

    def replies(self) -> list[object]:
        return [self._expect(i) for i in range(len(self.conns))]

    def check(self) -> None:
        """Raise ``RanksLost`` if any rank has ended or reported a failure."""
        if self.lost is not None:
            raise RanksLost(self.lost)
        if self.closed:
            raise RanksLost("the ranks were shut down")
        for i, (proc, conn) in enumerate(zip(self.procs, self.conns, strict=True)):
            if proc.poll() is not None:
                raise self.lose(f"rank {i + 1} exited with status {proc.returncode}")
            with contextlib.suppress(EOFError, OSError):
                if conn.poll():
                    msg = receive(conn)
                    reason = msg.message if isinstance(msg, Failed) else f"unexpected {type(msg).__name__}"
                    raise self.lose(f"rank {i + 1}: {reason}")

    def alive(self) -> bool:
        return self.lost is None and not self.closed and all(p.poll() is None for p in self.procs)

    # ---- endings ----------------------------------------------------------------------------

    def lose(self, reason: str) -> RanksLost:
        """Record why the group cannot go on, end every other rank; the error to raise."""
        if self.lost is None:
            deadline = time.monotonic() + 0.5  # a collective fails as a rank dies: name the rank
            while not any(p.poll() is not None for p in self.procs) and time.monotonic() < deadline:
                time.sleep(0.01)
            ended = [f"rank {i + 1} exited with status {p.returncode}" for i, p in enumerate(self.procs)
                     if p.returncode is not None]
            if ended and not reason.startswith("rank"):
                reason = f"{'; '.join(ended)} ({reason})"
            for i, conn in enumerate(self.conns):  # a rank that failed may have said why
                with contextlib.suppress(EOFError, OSError):
                    if conn.poll():
                        msg = receive(conn)
                        if isinstance(msg, Failed) and "failed" not in reason:
                            reason = f"{reason} (rank {i + 1} failed: {msg.message})"
            self.lost = reason
            self.abort(reason)
        return RanksLost(self.lost)

    def abort(self, reason: str) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            proc.wait()
        self._release()

    def close(self, timeout_s: float = 10.0) -> list[int]:
        """End every rank cleanly (a session or the worker is done); their exit statuses."""
        if not self.closed and self.lost is None:
            with contextlib.suppress(RanksLost):
                self.send([Stop()])
            deadline = time.monotonic() + timeout_s
            for proc in self.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(max(0.0, deadline - time.monotonic()))
            for proc in self.procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        self.closed = True
        self._release()
        return [p.returncode for p in self.procs]

    def _release(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.close()
        leave_group()
