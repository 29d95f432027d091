"""One thread per avatar session that runs the engine's blocking ``step()`` off the event loop.

The feed task wakes it after each feed; it runs every chunk whose audio is in and hands the
frames to ``deliver``, which blocks while the playout buffer is full (back-pressure travels
back to the engine instead of piling frames up).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from engine.frames import PublishedFrame

log = logging.getLogger(__name__)


class EngineSession(Protocol):
    def step(self) -> list[PublishedFrame]: ...
    def ready(self) -> bool: ...


class EngineWorker:
    def __init__(
        self,
        session: EngineSession,
        deliver: Callable[[list[PublishedFrame], float], None],
        name: str,
        poll_s: float = 0.1,
    ) -> None:
        self._session = session
        self._deliver = deliver
        self._poll_s = poll_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Ask the loop to end and wait for it; False if a step was still running at the timeout."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._session.ready():
                    self._wake.wait(self._poll_s)
                    self._wake.clear()
                    continue
                t0 = time.perf_counter()
                frames = self._session.step()
                if frames and not self._stop.is_set():
                    self._deliver(frames, time.perf_counter() - t0)
        except Exception as exc:
            if not self._stop.is_set():
                self.error = exc
                log.exception("engine worker %s failed", self._thread.name)
