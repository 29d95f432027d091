"""Pipeline hooks: a session's opening and every stage call pass through them, in order, with the
stage's input and output; sibling pipelines made afterwards carry them; frames are unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from engine.frames import drain
from engine.hooks import Hooks, PipelineHook
from engine.pipeline import Pipeline
from engine.stages.audio_to_video import A2VInput
from engine.stages.decode_publish import DecodeInput
from engine.stages.super_resolution import SRInput

pytestmark = pytest.mark.usefixtures("one_thread")


class Log(PipelineHook):
    def __init__(self, name: str, log: list[tuple[str, ...]]) -> None:
        self.name, self.log = name, log

    @contextmanager
    def opening(self) -> Iterator[None]:
        self.log.append((self.name, "open"))
        yield
        self.log.append((self.name, "opened"))

    @contextmanager
    def around(self, name: str, stage: object, inp: object) -> Iterator[None]:
        self.log.append((self.name, "enter", name, type(inp).__name__))
        try:
            yield
        finally:
            self.log.append((self.name, "exit", name))

    def made(self, name: str, out: object) -> None:
        self.log.append((self.name, "made", name, type(out).__name__))


def test_hooks_nest_in_the_order_they_were_added_and_see_what_was_made() -> None:
    log: list[tuple[str, ...]] = []
    hooks = Hooks()
    first, second = hooks.add(Log("a", log)), hooks.add(Log("b", log))
    assert hooks.run("sr", lambda x: x * 2, 21) == 42
    assert log == [("a", "enter", "sr", "int"), ("b", "enter", "sr", "int"), ("b", "exit", "sr"),
                   ("a", "exit", "sr"), ("a", "made", "sr", "int"), ("b", "made", "sr", "int")]
    assert hooks.find(Log) is first
    copy = copy_of = hooks.copy()
    hooks.remove(first)
    assert hooks.items == (second,) and copy_of.items == (first, second)
    log.clear()
    with copy.opening():
        log.append(("body",))
    assert log == [("a", "open"), ("b", "open"), ("body",), ("b", "opened"), ("a", "opened")]


def test_a_stage_that_fails_still_leaves_every_hook() -> None:
    log: list[tuple[str, ...]] = []
    hooks = Hooks()
    hooks.add(Log("a", log))

    def boom(_: object) -> object:
        raise RuntimeError("stage failed")

    with pytest.raises(RuntimeError, match="stage failed"):
        hooks.run("decode", boom, None)
    assert log == [("a", "enter", "decode", "NoneType"), ("a", "exit", "decode")]


def test_a_session_opens_and_runs_its_stages_through_the_hooks(micro_pipe_nointerp: Pipeline, speech) -> None:
    pipe = micro_pipe_nointerp.preset("fast")
    pcm = speech(1.0)
    plain = [f.rgb for f in pipe.render(pcm, avatar="ada")]
    log: list[tuple[str, ...]] = []
    hook = pipe.hooks.add(Log("h", log))
    try:
        session = pipe.open_session(avatar="ada")
        assert log == [("h", "open"), ("h", "opened")]
        session.feed(pcm)
        session.close_input()
        hooked = [f.rgb for f in drain(session)]
        sibling = pipe.with_interp(not pipe.config.schedule.interp)
        assert sibling.hooks.find(Log) is hook
    finally:
        pipe.hooks.remove(hook)
    assert len(hooked) == len(plain) and all(np.array_equal(a, b) for a, b in zip(hooked, plain, strict=True))
    entered = [(e[2], e[3]) for e in log if e[1] == "enter"]
    assert entered[0] == ("a2v", A2VInput.__name__)
    assert {("sr", SRInput.__name__), ("decode", DecodeInput.__name__)} <= set(entered)
    made = [e[2] for e in log if e[1] == "made"]
    assert made == [name for name, _ in entered]  # every call left once, in order
    assert made.index("sr") < made.index("decode")
