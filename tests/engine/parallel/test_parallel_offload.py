"""Pinned offload with block prefetch, on a CPU where copies are no-ops: the schedule (what is
prefetched when, what is resident while each unit runs, when it is released) and the output,
which is the plain pipeline's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from parallel_helpers import run_sessions

from engine.bench import speech_like
from engine.parallel.build import build_pipeline
from engine.parallel.offload import Offloader
from engine.parallel.plan import ParallelPlan
from engine.pipeline import Pipeline

# Outputs compared with one device's, nothing timed: `make test` runs it beside another test.
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.offline]


def expected_chunk(depth: int, forwards: int, publishes: bool) -> list[tuple[str, str]]:
    """One chunk's schedule: every forward runs the blocks in order, each block's successor
    fetched as it starts and the block released once it has run; the chunk's last block
    fetches SR (block 0 of the next chunk if it publishes nothing), SR the decoder, the
    decoder block 0 of the next chunk."""
    log: list[tuple[str, str]] = []
    for f in range(forwards):
        for i in range(depth):
            last = f == forwards - 1 and i == depth - 1
            after = f"block{i + 1}" if i + 1 < depth else ("sr" if last and publishes else "block0")
            log += [("run", f"block{i}"), ("prefetch", after), ("release", f"block{i}")]
    if publishes:
        log += [("run", "sr"), ("prefetch", "decoder"), ("release", "sr"),
                ("run", "decoder"), ("prefetch", "block0"), ("release", "decoder")]
    return log


def replay(log: list[tuple[str, str]]) -> int:
    """Check residency along the log; the most units resident at once."""
    resident: set[str] = set()
    most = 0
    for what, unit in log:
        if what == "prefetch":
            assert unit not in resident, f"{unit} fetched twice"
            resident.add(unit)
        elif what == "run":
            assert unit in resident, f"{unit} ran without being resident"
        else:
            resident.remove(unit)
        most = max(most, len(resident))
    return most


@pytest.fixture
def offloaded(micro_weights: Path) -> Pipeline:
    pipe = build_pipeline(ParallelPlan(offload=True), name="micro", weights=str(micro_weights), interp=False)
    assert isinstance(Offloader.of(pipe), Offloader)
    return pipe


def test_each_chunk_prefetches_in_execution_order_and_releases_what_ran(offloaded: Pipeline) -> None:
    off = Offloader.of(offloaded)
    depth = len(offloaded.models.dit.blocks)
    session = offloaded.open_session(avatar="ada", seed=1)
    opened = list(off.log)
    assert opened[:4] == [("prefetch", "encoder"), ("run", "encoder"), ("prefetch", "decoder"), ("run", "decoder")]
    assert opened[-2:] == [("release", "encoder"), ("release", "decoder")]
    session.feed(speech_like(2.0, 16000))
    session.close_input()
    chunks = []
    for chunk in range(3):
        start = len(off.log)
        assert session.step()
        chunks += off.log[start:]
        # the first chunk's first block came in with the reference's encoding, the others' with a decode
        assert off.log[start:] == expected_chunk(depth, offloaded.steps + 1, publishes=True), chunk
    assert replay([("prefetch", "block0"), *chunks]) == 2  # what runs and what runs next, never more
    assert set(off.resident) == {"block0"}  # between chunks: only the next chunk's first block
    assert set(off.switch_ms()) >= {"dit→dit", "dit→sr", "sr→decoder", "decoder→dit"}


def test_copies_on_a_cpu_are_no_ops_and_the_output_is_the_plain_pipeline(
        offloaded: Pipeline, micro_weights: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = offloaded.models.dit.blocks[0]
    before = block.qkv.weight.data_ptr()
    plain = Pipeline.from_config("micro", weights=str(micro_weights), interp=False)
    got, want = run_sessions(offloaded, monkeypatch), run_sessions(plain, monkeypatch)
    assert block.qkv.weight.data_ptr() == before and block.qkv.weight.device == torch.device("cpu")
    for g, w in zip(got.latents, want.latents, strict=True):
        assert torch.equal(g, w)
    assert got.video and all(torch.equal(g, w) for g, w in zip(got.video, want.video, strict=True))
    assert [[f.index for f in fr] for fr in got.frames] == [[f.index for f in fr] for fr in want.frames]


def test_interp_chunks_fetch_sr_on_their_last_forward(micro_weights: Path) -> None:
    pipe = build_pipeline(ParallelPlan(offload=True), name="micro", weights=str(micro_weights))
    off, depth = Offloader.of(pipe), len(pipe.models.dit.blocks)
    session = pipe.open_session(avatar="ben")
    session.feed(speech_like(3.0, 16000))
    opened, seen = len(off.log), set()
    while len(seen) < 3:  # N chunks with and without frames, I chunks
        start = len(off.log)
        session.step()
        kind = session.last_chunk[0]
        forwards = pipe.steps + 1 if kind == "N" else min(pipe.steps, pipe.config.interp_steps)
        publishes = ("run", "sr") in off.log[start:]
        assert off.log[start:] == expected_chunk(depth, forwards, publishes), session.last_chunk
        seen.add((kind, publishes))
    assert replay([("prefetch", "block0"), *off.log[opened:]]) == 2


def test_quality_presets_share_the_offloader(offloaded: Pipeline) -> None:
    """A preset's pipeline (the engine worker runs sessions on them) keeps to the same schedule."""
    fast = offloaded.preset("fast").preset("quality")
    assert fast is not offloaded and Offloader.of(fast) is Offloader.of(offloaded)
    start = len(Offloader.of(offloaded).log)
    session = fast.open_session(avatar="cleo")
    session.feed(speech_like(1.0, 16000))
    session.close_input()
    while not session.finished:
        session.step()
    ran = [unit for what, unit in Offloader.of(offloaded).log[start:] if what == "run"]
    assert {"encoder", "sr", "decoder", "block0", "block1"} <= set(ran)
