"""Start-up's objects kept out of later collections, and what comes after still collected."""

from __future__ import annotations

import gc
import weakref

from engine.heap import freeze_heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_what_start_up_left_is_frozen_and_later_cycles_are_still_collected() -> None:
    try:
        start_up = [Node() for _ in range(50_000)]  # objects a start-up leaves alive
        dead = Node()
        dead.other = Node()
        dead.other.other = dead  # start-up's own garbage: a cycle nobody holds
        dead_ref = weakref.ref(dead)
        del dead
        frozen = freeze_heap()
        assert dead_ref() is None, "collected before the freeze, not frozen with the rest"
        assert frozen >= len(start_up) and gc.get_freeze_count() == frozen
        tracked = len(gc.get_objects())
        assert tracked < frozen, "a full collection no longer walks them"

        later = Node()
        later.other = Node()
        later.other.other = later
        later_ref = weakref.ref(later)
        del later
        gc.collect()
        assert later_ref() is None, "a session's garbage is collected as before"
    finally:
        gc.unfreeze()
