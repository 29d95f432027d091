"""Where other parts join a pipeline's work without replacing its parts.

A :class:`PipelineHook` holds a context while a session opens and around each call of a
pipeline's stages (``a2v``, ``sr``, ``decode``), and sees what each call made. Offload keeps a
unit on the device for as long as its stage runs (``engine.parallel.offload``); a bench keeps
what the stages produce; training records what super-resolution is given. A pipeline's hooks go
with the sibling pipelines (its quality presets over the same models) it makes afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import TypeVar

H = TypeVar("H", bound="PipelineHook")


class PipelineHook:
    """One part's hook points; each does nothing unless overridden."""

    def opening(self) -> AbstractContextManager[None]:
        """Held while a session opens (its reference encoded, its decoder cache made)."""
        return nullcontext()

    def around(self, name: str, stage: Callable[[object], object], inp: object) -> AbstractContextManager[None]:
        """Held while the stage called ``name`` runs on ``inp``."""
        return nullcontext()

    def made(self, name: str, out: object) -> None:
        """What a call of the stage called ``name`` returned."""


class Hooks:
    """A pipeline's hooks, entered in the order they were added."""

    def __init__(self, hooks: tuple[PipelineHook, ...] = ()) -> None:
        self.items: tuple[PipelineHook, ...] = hooks

    def add(self, hook: H) -> H:
        self.items = (*self.items, hook)
        return hook

    def remove(self, hook: PipelineHook) -> None:
        self.items = tuple(h for h in self.items if h is not hook)

    def find(self, kind: type[H]) -> H | None:
        """The first hook of ``kind``, if any."""
        return next((h for h in self.items if isinstance(h, kind)), None)

    def copy(self) -> Hooks:
        """The same hooks for a sibling pipeline: hooks added to either later stay its own."""
        return Hooks(self.items)

    @contextmanager
    def opening(self) -> Iterator[None]:
        with ExitStack() as stack:
            for hook in self.items:
                stack.enter_context(hook.opening())
            yield

    def run(self, name: str, stage: Callable[[object], object], inp: object) -> object:
        """``stage(inp)`` (the pipeline's stage called ``name``) inside every hook's context."""
        if not self.items:
            return stage(inp)
        with ExitStack() as stack:
            for hook in self.items:
                stack.enter_context(hook.around(name, stage, inp))
            out = stage(inp)
        for hook in self.items:
            hook.made(name, out)
        return out
