"""Where a worker loop runs, and how the web process talks with it: a subprocess of its own
(crash-isolated; a pipe, pickled messages, a writer thread, frames in shared memory), a worker
of the node's engine service shared with the node's other web processes (the same, over its
local socket), or a thread here (no isolation; messages handed over as they are, nothing
pickled, frames in this process's memory).

Every handle is connected once, on the event loop: the worker's messages reach
``on_message`` on that loop, ``on_lost`` is called once the worker or its connection is gone,
and the returned callable sends the worker a message without ever waiting. Nothing that can wait
on a worker runs on the loop: a connection's messages are read whole by a reader thread of its
own (a worker that stalls halfway through a message holds up only that thread), and the
handshake with a node's worker runs in a thread too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import queue
import secrets
import signal
import socket
import threading
import weakref
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection
from typing import Protocol

from engine.service.messages import WorkerFailed
from engine.service.outbox import Outbox
from engine.service.slots import FrameSlots
from engine.service.worker import WorkerOptions, process_main, serve

Send = Callable[[object], None]
log = logging.getLogger(__name__)
READ_POLL_S = 0.2  # how often a reader thread looks whether its handle was disconnected
DIAL_TIMEOUT_S = 30.0  # for a node's worker to answer the handshake; then the start failed
_LOST = object()  # in a reader's inbox: the connection ended


class WorkerHandle(Protocol):
    pid: int | None
    sentinel: int | None  # a file descriptor readable once the worker has ended (None: a thread)

    def connect(self, on_message: Callable[[object], None], on_lost: Callable[[str], None], name: str) -> Send: ...

    def frame_slots(self, count: int, frame_size: tuple[int, int], audio_samples: int) -> tuple[str, FrameSlots]:
        """A new session's slots, and the address the worker finds them at."""

    def receive(self) -> None:
        """Hand ``on_message`` what the worker said and the loop has not taken yet."""

    def disconnect(self) -> None: ...

    def alive(self) -> bool: ...

    def kill(self) -> None: ...

    def join(self, timeout: float) -> None: ...


class ConnectionHandle:
    """A worker in another process, over a connection: pickled messages, a writer thread and a
    reader thread (the loop never waits on the worker), frames in shared memory."""

    conn: Connection
    sentinel: int | None = None
    _connected = False

    def connect(self, on_message: Callable[[object], None], on_lost: Callable[[str], None], name: str) -> Send:
        self._loop = loop = asyncio.get_running_loop()
        self._on_message, self._on_lost = on_message, on_lost
        self._outbox = Outbox(self.conn, lambda reason: loop.call_soon_threadsafe(on_lost, reason), name)
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._woken = False  # a receive() is on the loop's way
        self._connected = True
        threading.Thread(target=self._read, name=f"{name}-reader", daemon=True).start()
        if self.sentinel is not None:
            loop.add_reader(self.sentinel, on_lost, "the engine worker process exited")
        return self._outbox.put

    def frame_slots(self, count: int, frame_size: tuple[int, int], audio_samples: int) -> tuple[str, FrameSlots]:
        slots = FrameSlots.create(count, frame_size, audio_samples)
        return str(slots.path), slots

    def _read(self) -> None:
        """The reader thread: whole messages off the connection, into the inbox, the loop woken.
        It ends once the handle is disconnected (within ``READ_POLL_S``) or the connection ends."""
        try:
            while self._connected:
                if not self.conn.poll(READ_POLL_S):
                    continue
                try:
                    msg = self.conn.recv()
                except (EOFError, OSError):
                    raise
                except Exception:  # one message that cannot be unpickled: the next ones still count
                    log.exception("a message from the engine worker could not be read")
                    continue
                self._inbox.put(msg)
                self._wake()
        except (EOFError, OSError):
            self._inbox.put(_LOST)
            self._wake()
        finally:
            if not self._connected:  # disconnected: nothing reads it any more
                self.conn.close()

    def _wake(self) -> None:
        if not self._woken:
            self._woken = True
            with contextlib.suppress(RuntimeError):  # the loop has ended
                self._loop.call_soon_threadsafe(self.receive)

    def receive(self) -> None:
        self._woken = False  # before the inbox is read: a message put after this wakes the loop again
        while self._connected:
            try:
                msg = self._inbox.get_nowait()
            except queue.Empty:
                return
            if msg is _LOST:
                self._on_lost("the engine worker closed its connection")
                return
            self._on_message(msg)

    def disconnect(self) -> None:
        if not self._connected:
            return
        self._connected = False
        self._outbox.close()
        if self.sentinel is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.sentinel)


class ProcessHandle(ConnectionHandle):
    """A worker subprocess this process starts (and owns: its end of the pipe ends the worker)."""

    def __init__(self, options: WorkerOptions) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited threads or loop
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=process_main, args=(child, options), name="avatar-engine", daemon=True)
        self.process.start()
        child.close()
        self.pid = self.process.pid
        self.sentinel = self.process.sentinel

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGKILL)

    def join(self, timeout: float) -> None:
        self.process.join(timeout)


class NodeHandle(ConnectionHandle):
    """A worker of this node's engine service, started by the node (``avatar serve
    --web-processes``) and shared by its web processes: this process reaches it at its local
    socket as one guest among several (``engine.service.worker_clients``). It cannot kill the worker:
    "kill" and "disconnect" end this process's connection, which ends its sessions there."""

    def __init__(self, options: WorkerOptions, dial_timeout_s: float = DIAL_TIMEOUT_S) -> None:
        self.pid = None  # learnt from WorkerReady
        self._address = options.address
        self._key = options.key
        self._dial_timeout_s = dial_timeout_s
        self._error: str | None = None
        self._held: list[object] | None = []  # sent before the handshake ended: sent after it
        self._left = False

    def connect(self, on_message: Callable[[object], None], on_lost: Callable[[str], None], name: str) -> Send:
        """The handshake runs in a thread; what is sent meanwhile is held, and sent once it is done."""
        self._loop = loop = asyncio.get_running_loop()
        self._on_lost = on_lost
        self._dialling = loop.create_task(self._dial(on_message, on_lost, name))
        return self._send

    async def _dial(self, on_message: Callable[[object], None], on_lost: Callable[[str], None], name: str) -> None:
        dialled = asyncio.ensure_future(asyncio.to_thread(Client, self._address, family="AF_UNIX",
                                                          authkey=self._key))
        try:
            conn = await asyncio.wait_for(asyncio.shield(dialled), self._dial_timeout_s)
        except asyncio.CancelledError:
            dialled.add_done_callback(_close_late)
            raise
        except TimeoutError:
            dialled.add_done_callback(_close_late)
            self._error = f"the engine worker at {self._address} did not answer in {self._dial_timeout_s:.0f} s"
        except (OSError, AuthenticationError, EOFError) as exc:
            self._error = f"the engine worker at {self._address} cannot be reached: {exc.__class__.__name__}: {exc}"
        if self._error is not None:  # reported as a failed start: the pool tries again after a back-off
            self._held = None
            if not self._left:
                on_message(WorkerFailed(self._error))
            return
        if self._left:  # this process left while the handshake ran
            conn.close()
            return
        self.conn = conn
        send = super().connect(on_message, on_lost, name)
        held, self._held = self._held, None
        for msg in held:
            send(msg)

    def _send(self, msg: object) -> None:
        if self._held is not None:
            self._held.append(msg)
        elif self._connected:
            self._outbox.put(msg)

    def alive(self) -> bool:
        return self._error is None and self._connected

    def kill(self) -> None:
        """This process leaves the worker: its sessions there end (the worker closes them)."""
        if self._held is not None:  # still shaking hands: the connection is closed as it comes
            self._left = True
            self._held = None
            return
        if not self.alive():
            return
        self.disconnect()
        # The worker reads end-of-file; the reader thread wakes, ends and closes the connection.
        with contextlib.suppress(OSError), socket.socket(fileno=os.dup(self.conn.fileno())) as sock:
            sock.shutdown(socket.SHUT_RDWR)
        self._loop.call_soon(self._on_lost, "this web process left the engine worker")

    def disconnect(self) -> None:
        if self._held is not None:
            self.kill()
            return
        super().disconnect()

    def join(self, timeout: float) -> None:
        """Nothing to wait for: the worker is the node's."""


def _close_late(dialled: asyncio.Future) -> None:
    """A handshake that ended after it was given up on: its connection is not used."""
    if not dialled.cancelled() and dialled.exception() is None:
        dialled.result().close()


class LocalConnection:
    """An in-process worker's connection: the worker thread's ``recv`` and ``send``, the web side's ``put``."""

    _CLOSED = object()

    def __init__(self, loop: asyncio.AbstractEventLoop, on_message: Callable[[object], None]) -> None:
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._loop = loop
        self._on_message = on_message

    def put(self, msg: object) -> None:
        """From the web side: straight into the worker's inbox."""
        self._inbox.put(msg)

    def recv(self) -> object:
        msg = self._inbox.get()
        if msg is self._CLOSED:
            raise EOFError
        return msg

    def send(self, msg: object) -> None:
        """From the worker: onto the event loop (dropped once the loop has ended)."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._on_message, msg)

    def close(self) -> None:
        """The worker reads end-of-file next, and its loop stops."""
        self._inbox.put(self._CLOSED)


class ThreadHandle:
    """In-process worker: the same worker loop on a thread of this process, with no isolation (a
    crash here is the web process's). ``load`` may build its core from an engine already loaded
    in this process."""

    def __init__(self, options: WorkerOptions, load: Callable | None = None) -> None:
        self._options = options
        self._load = load
        self._thread: threading.Thread | None = None
        self._conn: LocalConnection | None = None
        # Slots handed to the worker by name; each entry goes with the web side's handle.
        self._slots: weakref.WeakValueDictionary[str, FrameSlots] = weakref.WeakValueDictionary()
        self.pid = os.getpid()
        self.sentinel = None

    def connect(self, on_message: Callable[[object], None], on_lost: Callable[[str], None], name: str) -> Send:
        loop = asyncio.get_running_loop()
        self._conn = conn = LocalConnection(loop, on_message)
        self._thread = threading.Thread(target=self._run, args=(conn, loop, on_lost), name="avatar-engine",
                                        daemon=True)
        self._thread.start()
        return conn.put

    def frame_slots(self, count: int, frame_size: tuple[int, int], audio_samples: int) -> tuple[str, FrameSlots]:
        slots = FrameSlots.in_memory(count, frame_size, audio_samples)
        address = f"memory-{secrets.token_hex(6)}"
        self._slots[address] = slots
        return address, slots

    def _attach(self, address: str, count: int, frame_size: tuple[int, int], audio_samples: int) -> FrameSlots:
        slots = self._slots.get(address)
        if slots is None or slots.count != count or (slots.height, slots.width) != frame_size \
                or slots.audio_samples != audio_samples:
            raise ValueError(f"no in-process slots {address} of {count} slots of this frame size")
        return slots.share()

    def _run(self, conn: LocalConnection, loop: asyncio.AbstractEventLoop, on_lost: Callable[[str], None]) -> None:
        try:
            serve(conn, self._options, self._load, self._attach)
        finally:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(on_lost, "the engine worker thread ended")

    def receive(self) -> None:
        """Nothing waits: each message was put on the loop as it was sent."""

    def disconnect(self) -> None:
        self.kill()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def kill(self) -> None:
        """A thread cannot be killed: its connection closes, and its loop stops at the next command."""
        if self._conn is not None:
            self._conn.close()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)


def launcher(kind: str, load: Callable | None = None) -> Callable[[WorkerOptions], WorkerHandle]:
    """``subprocess`` (default), ``inprocess`` (where ``load`` may supply a preloaded core) or
    ``node`` (the node's shared workers, at ``WorkerOptions.address``)."""
    if kind == "subprocess":
        if load is not None:
            raise ValueError("a subprocess worker loads its own engine")
        return ProcessHandle
    if kind == "inprocess":
        return lambda options: ThreadHandle(options, load)
    if kind == "node":
        return NodeHandle
    raise ValueError(f"unknown engine kind {kind!r}; choose subprocess, inprocess or node")
