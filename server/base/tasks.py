"""Background tasks kept by their owner, so that closing it can cancel and await every one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class TaskSet:
    """The running tasks an owner started; each leaves the set when it ends (asyncio keeps only a
    weak reference to a task, so an unreferenced one may be collected mid-run). A task that ends
    by raising is handed to ``on_failure`` (the owner logs and reports it), never silently gone."""

    def __init__(self, prefix: str = "",
                 on_failure: Callable[[asyncio.Task, BaseException], None] | None = None) -> None:
        self._prefix = prefix
        self._tasks: set[asyncio.Task] = set()
        self._on_failure = on_failure

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self._prefix}{name}")
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is None or self._on_failure is None:
            return
        self._on_failure(task, task.exception())

    def others(self) -> list[asyncio.Task]:
        """Every running task but the caller's own (a task cannot wait for itself)."""
        current = asyncio.current_task()
        return [t for t in self._tasks if t is not current]

    def cancel(self) -> None:
        """Cancel every running task but the caller's own."""
        for task in self.others():
            task.cancel()

    async def wait(self) -> None:
        """Until every running task but the caller's own has ended, whatever it raised."""
        others = self.others()
        if others:
            await asyncio.gather(*others, return_exceptions=True)

    def __len__(self) -> int:
        return len(self._tasks)
