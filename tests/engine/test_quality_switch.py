"""Per-session quality mid-stream: I chunks switched off and on, denoising steps and guidance
changed at chunk boundaries. The schedule as pure functions first (every latent published
exactly once, in order, and never regenerated after), then a running session (every frame
once, from the chunk the schedule says, with the steps asked for, in bounded state)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from batch_helpers import assert_same_frames

from engine.bench import speech_like
from engine.config import ScheduleConfig, get_config
from engine.pipeline import Pipeline, StreamSession
from engine.quality import Quality
from engine.schedule import ChunkPlan, ChunkSchedule
from engine.stages.decode_publish import frame_latent, frame_span

pytestmark = pytest.mark.usefixtures("one_thread")

SR, SPF = 16000, 640
# every valid shape up to chunks of 7 latents
SCHEDULES = [ScheduleConfig(chunk=c, seam=s, anchor=a)
             for c in range(3, 8) for s in (1, 2) for a in (1, 2, 3) if 2 * s + a <= c]


def run_schedule(config: ScheduleConfig, n_chunks: int, interp_before: dict[int, bool]) -> list[ChunkPlan]:
    """The chunks a stream of ``n_chunks`` N chunks runs when I chunks are asked on or off
    (``interp_before[k]``) before N_k, as a session does: an I chunk already owed still runs."""
    schedule, plans, pending = ChunkSchedule(config), [], None
    for k in range(n_chunks):
        if pending is not None:
            plans.append(pending)
        schedule = schedule.switched(interp_before.get(k, schedule.config.interp), k)
        plans.append(schedule.n_chunk(k))
        pending = schedule.i_after(k)
    if pending is not None:
        plans.append(pending)
    lo, hi = schedule.tail(n_chunks - 1)
    return plans + [ChunkPlan("N", n_chunks - 1, (hi, hi), (hi, hi), (lo, hi))]  # the tail, as a plan


def check_published_once_and_final(plans: list[ChunkPlan], total: int) -> None:
    published = 0
    for plan in plans:
        lo, hi = plan.publish
        assert lo == published and hi >= lo, f"{plan.name} publishes [{lo}, {hi}) after {published}"
        assert plan.generate[0] >= published, f"{plan.name} regenerates published latents"
        published = hi
    assert published == total


def interp_runs(n_chunks: int, interp_before: dict[int, bool], start: bool) -> list[bool]:
    runs, on = [], start
    for k in range(n_chunks):
        on = interp_before.get(k, on)
        runs.append(on)
    return runs


@pytest.mark.parametrize("cfg", SCHEDULES, ids=lambda c: f"C{c.chunk}s{c.seam}a{c.anchor}")
@pytest.mark.parametrize("start", [True, False], ids=["from-on", "from-off"])
def test_every_latent_is_published_once_across_interp_switches(cfg: ScheduleConfig, start: bool) -> None:
    cfg = dataclasses.replace(cfg, interp=start)
    rng = np.random.default_rng(cfg.chunk * 7 + start)
    patterns = [{}, {2: not start}, {1: not start, 3: start, 4: not start}, {0: not start}]
    patterns += [{int(k): bool(rng.integers(2)) for k in rng.choice(12, 5, replace=False)} for _ in range(20)]
    for pattern in patterns:
        for n in (1, 2, 5, 12):
            plans = run_schedule(cfg, n, pattern)
            check_published_once_and_final(plans, n * cfg.chunk)
            runs = interp_runs(n, pattern, start)
            seams = [p.index for p in plans if p.kind == "I"]
            # a seam is smoothed exactly where both its sides ran with I chunks on
            assert seams == [k for k in range(n - 1) if runs[k] and runs[k + 1]], (pattern, n)


def test_switching_on_publishes_like_n0_and_off_publishes_the_waiting_seam() -> None:
    cfg = ScheduleConfig(chunk=4, seam=1, anchor=1)
    on = ChunkSchedule(cfg)
    off = on.switched(False, 3)  # asked off after N2, while N2's last latent waits for I2
    assert off.since == 3 and on.switched(True, 3) is on
    assert off.n_chunk(3).publish == (11, 16) and off.n_chunk(4).publish == (16, 20)
    assert off.i_after(3) is None and off.tail(4) == (20, 20)
    assert off.tail(2) == (11, 12)  # the stream ended before N3 ran: N2's seam is still waiting
    again = off.switched(True, 5)  # N4 published its whole span: no I4 for the seam at 20
    assert again.n_chunk(5).publish == (20, 23) and again.i_after(5) is None
    assert again.n_chunk(6).publish == (23, 23) and again.i_after(6).name == "I5"
    assert again.tail(6) == (27, 28) and again.tail(4) == (20, 20)
    with pytest.raises(ValueError, match="N4 ran before"):
        again.n_chunk(4)
    with pytest.raises(ValueError):  # a schedule without seams cannot switch I chunks on
        ChunkSchedule(ScheduleConfig(chunk=4, seam=0, anchor=0, interp=False)).switched(True, 2)


class DiTCalls:
    """Stands in for the DiT inside the AudioToVideo stage; counts its calls."""

    def __init__(self, dit: torch.nn.Module) -> None:
        self.dit, self.count = dit, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.dit, name)

    def __call__(self, *args: object, **kwargs: object) -> tuple:
        self.count += 1
        return self.dit(*args, **kwargs)


def test_quality_switches_mid_stream_publish_every_frame_once(micro_weights: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """I chunks on -> off -> on -> off -> on and steps 3 -> 2, switched by a running session."""
    pipe = Pipeline.from_config("micro", weights=micro_weights, steps=3)
    c = pipe.config.schedule.chunk
    pcm = speech_like(6.0, SR, seed=4)  # 150 frames: 39 latents, 13 N chunks
    # asked after the named chunk ran; after N2 and N8 an I chunk is owed and still runs
    after = {"N2": Quality(interp=False), "N5": Quality(interp=True, steps=2),
             "N8": Quality(interp=False, steps=2), "N10": Quality(interp=True, steps=2)}
    interp_before = {3: False, 6: True, 9: False, 11: True}
    steady = pipe.open_session(seed=2)
    steady.feed(pcm)
    steady.close_input()
    reference, steady_held = [], []
    while not steady.finished:
        reference += steady.step()
        steady_held.append(steady.nbytes())

    session = pipe.open_session(seed=2)
    session.feed(pcm)
    session.close_input()
    calls = DiTCalls(pipe.a2v.dit)
    monkeypatch.setattr(pipe.a2v, "dit", calls)
    frames, names, dit_calls, held, window = [], [], [], [], []
    while not session.finished:
        before = calls.count
        frames += session.step()
        if session.finished:
            break
        names.append(session.last_chunk)
        dit_calls.append(calls.count - before)
        held.append(session.nbytes())
        window.append(len(session.state.latents.data))
        if session.last_chunk in after:
            session.set_quality(after[session.last_chunk])
            assert session.quality == after[session.last_chunk]
    assert names == ["N0", "N1", "I0", "N2", "I1", "N3", "N4", "N5", "N6", "N7", "I6", "N8", "I7",
                     "N9", "N10", "N11", "N12", "I11"]
    # N chunks: their steps and one pass for the history; I chunks: min(3, interp_steps) steps
    steps = [3] * 6 + [2] * 7
    assert dit_calls == [steps[int(n[1:])] + 1 if n[0] == "N" else 2 for n in names]

    n = math.ceil(pcm.size / SPF)
    assert [f.index for f in frames] == list(range(n))
    padded = np.zeros(n * SPF, np.float32)
    padded[:pcm.size] = pcm
    producer = {}  # latent -> the last chunk that generated it, from the schedule alone
    for plan in run_schedule(pipe.config.schedule, 13, interp_before):
        producer.update({g: plan.name for g in range(*plan.generate)})
    for f in frames:
        np.testing.assert_array_equal(f.audio, padded[f.index * SPF:(f.index + 1) * SPF])
        assert f.chunk == producer[frame_latent(f.index, 4)], f.index
    # until the first switch changes a chunk, the frames are the unswitched session's own
    first_changed = frame_span(0, 3 * c - 1, 4)[1]  # N2's last latent is the first I2 no longer smooths
    assert_same_frames(frames[:first_changed], reference[:first_changed])
    assert any(not np.array_equal(a.rgb, b.rgb) for a, b in zip(frames[first_changed:], reference[first_changed:],
                                                                 strict=True))
    # bounded: never more latents than a chunk and an I chunk's overhang, never more bytes than steady
    assert max(window) <= c + 2 * pipe.config.schedule.seam + pipe.config.schedule.anchor
    assert max(held) <= max(steady_held)


def closed_session(pipe: Pipeline, pcm: np.ndarray) -> StreamSession:
    s = pipe.open_session(avatar="dev", seed=5)
    s.feed(pcm)
    s.close_input()
    return s


def run(pipe: Pipeline, pcm: np.ndarray, quality: Quality | None = None, after: str | None = None) -> list:
    """All frames of a session, asked for ``quality`` from the start or after chunk ``after``."""
    s = closed_session(pipe, pcm)
    if quality is not None and after is None:
        s.set_quality(quality)
    frames = []
    while not s.finished:
        frames += s.step()
        if quality is not None and s.last_chunk == after:
            s.set_quality(quality)
    return frames


def test_guidance_off_runs_unguided_and_steps_follow_the_quality(micro_weights: Path, micro_pipe: Pipeline,
                                                                  micro_pipe_nointerp: Pipeline) -> None:
    pcm = speech_like(3.0, SR, seed=6)
    guided = Pipeline.from_config("micro", weights=micro_weights, guidance=2.0)
    plain, with_guidance = run(micro_pipe, pcm), run(guided, pcm)
    assert any(not np.array_equal(a.rgb, b.rgb) for a, b in zip(with_guidance, plain, strict=True))
    assert_same_frames(run(guided, pcm, Quality(guidance=False)), plain)  # the unguided engine's frames
    switched = run(guided, pcm, Quality(guidance=False), after="I0")  # from N2 on, unguided
    cut = frame_span(0, 2 * micro_pipe.config.schedule.chunk - 1, 4)[1]  # what I0 published
    assert_same_frames(switched[:cut], with_guidance[:cut])
    assert any(not np.array_equal(a.rgb, b.rgb) for a, b in zip(switched[cut:], with_guidance[cut:], strict=True))
    # one step on N chunks is the engine configured with one step (without I chunks, whose steps differ)
    one_step = Pipeline.from_config("micro", weights=micro_weights, interp=False, steps=1)
    assert_same_frames(run(micro_pipe_nointerp, pcm, Quality(interp=False, steps=1)), run(one_step, pcm))


def test_bad_quality_levels_are_refused(micro_pipe: Pipeline) -> None:
    for steps in (0, 9):
        with pytest.raises(ValueError, match="steps"):
            Quality(steps=steps)
    session = micro_pipe.open_session()
    assert session.quality == Quality(interp=True)
    seamless = get_config("micro").with_schedule(interp=False, seam=0, anchor=0)
    flat = Pipeline(seamless, micro_pipe.models).open_session()
    assert flat.quality == Quality(interp=False)
    with pytest.raises(ValueError):
        flat.set_quality(Quality(interp=True))
    assert flat.quality == Quality(interp=False)
    flat.set_quality(Quality(interp=False, steps=1, guidance=False))
    assert flat.quality.steps == 1
