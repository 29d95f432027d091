"""EngineCore on a fake clock: batches across sessions, credit, priorities, quality levels, capacity."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from engine.batch import Render
from engine.presets import Preset
from engine.service.core import EngineCore, SessionRefused
from engine.service.costs import CostModel
from engine.service.messages import SessionSpec
from engine.service.scheduler import MOST_SESSIONS, sessions_in_real_time
from engine.service.worker import describe


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def core(micro_pipe):
    clock = FakeClock()
    c = EngineCore(micro_pipe, describe(micro_pipe), clock=clock, costs=CostModel(prior_s=0.01))
    c.fake_clock = clock
    return c


def open_fed(core, name: str, seconds: float, seed: int = 0, loud: bool = True, **spec) -> None:
    """A ``quality`` session (unless ``spec`` says otherwise) fed ``seconds`` of noise or silence."""
    core.open(name, SessionSpec(seed=seed, **{"preset": Preset.QUALITY, **spec}), core.slot_frames)
    sr = core.info.sample_rate
    rng = np.random.default_rng(seed)
    pcm = (0.3 if loud else 0.0) * rng.standard_normal(int(seconds * sr)).astype(np.float32)
    core.push(name, 0, pcm)


def give_back(core, outcome) -> None:
    for name, frames in outcome.frames.items():
        core.release(name, tuple(slot for slot, _ in frames))


def test_sessions_at_the_same_step_run_in_one_batch_and_publish_in_order(core):
    for i in range(3):
        open_fed(core, f"s{i}", 3.0, seed=i)
    outcome = core.step()
    assert sorted(outcome.batch) == ["s0", "s1", "s2"]
    indices = {name: [] for name in outcome.batch}
    while outcome is not None:
        give_back(core, outcome)
        for name, frames in outcome.frames.items():
            indices[name] += [f.index for _, f in frames]
        outcome = core.step()
    for name, got in indices.items():
        assert got == list(range(len(got))) and len(got) > 30, name
    assert core.batch_mean > 2.5


def test_a_session_without_free_slots_waits_for_playout(core):
    open_fed(core, "a", 3.0)
    session = core.sessions["a"]
    held = list(session.free_slots)[: len(session.free_slots) - core.step_frames + 1]
    session.free_slots = deque(list(session.free_slots)[len(held):])
    assert core.step() is None, "fewer free slots than one step can publish: no work"
    core.release("a", tuple(held))
    outcome = core.step()
    assert outcome is not None and outcome.batch == ("a",)
    slots = [slot for slot, _ in outcome.frames["a"]]
    assert len(set(slots)) == len(slots) and not set(slots) & set(session.free_slots)


def test_a_refused_session_leaves_the_others_running(core):
    open_fed(core, "a", 2.0)
    with pytest.raises(SessionRefused, match="nobody"):
        core.open("b", SessionSpec(avatar="nobody"), core.slot_frames)
    with pytest.raises(SessionRefused, match="preset"):
        core.open("c", SessionSpec(preset="ultra"), core.slot_frames)
    assert list(core.sessions) == ["a"] and core.step().batch == ("a",)


def test_the_earliest_deadline_runs_first_and_speech_before_silence(core):
    open_fed(core, "late", 3.0, seed=1)
    open_fed(core, "soon", 3.0, seed=2)
    give_back(core, core.step())  # both run their first chunk together
    now = core.fake_clock.now
    core.set_origin("late", now + 5.0)
    core.set_origin("soon", now + 1.0)
    core.max_batch = 1
    assert core.step().batch == ("soon",)
    core.close("late")
    core.close("soon")
    open_fed(core, "quiet", 3.0, seed=3, loud=False)
    open_fed(core, "talk", 3.0, seed=4)
    for name in ("quiet", "talk"):
        core.set_origin(name, now)  # the same deadline: the speaking one goes first
    order = []
    while "quiet" not in (batch := core.step().batch):  # slots are not given back: talk runs out of credit
        order.append(batch)
        assert len(order) < 10
    assert order and set(order) == {("talk",)}
    assert "talk" not in {c.session for c in core.candidates(core.fake_clock.now)}


def test_quality_goes_down_under_overload_and_back_up_after_the_hold(core):
    open_fed(core, "a", 6.0)
    give_back(core, core.step())
    clock = core.fake_clock
    for key in core.work_per_period("quality"):
        for _ in range(5):
            core.costs.observe(key, 1, 5.0)  # a chunk now takes 5 s: the deadline cannot be met
    core.set_origin("a", clock.now)
    outcome = core.step()
    give_back(core, outcome)
    assert [(c.old, c.new, c.reason) for c in outcome.changes] == [(0, 1, "overload")]
    assert core.sessions["a"].stream.quality == core.sessions["a"].ladder[1]
    assert core.sessions["a"].stream.quality.interp is False
    core.costs = CostModel(prior_s=0.001)  # the device is fast again
    core.set_origin("a", clock.now + 30.0)
    ups = []
    for _ in range(10):
        clock.now += 1.0
        outcome = core.step()
        if outcome is None:
            break
        give_back(core, outcome)
        ups += [(c.new, c.reason) for c in outcome.changes]
    assert ups == [(0, "recovered")], "one level back up once slack held for the hold time, no more"


def test_capacity_is_what_fits_in_real_time_minus_the_sessions_held(core):
    costs = core.costs
    for kind_key in core.work_per_period():
        costs.observe(kind_key, 1, 0.02)
        costs.observe(kind_key, 4, 0.05)
    period = core.info.frames_per_chunk / core.info.fps
    total = sessions_in_real_time(costs, core.work_per_period(), period)
    assert total > 4 and core.capacity() == total
    open_fed(core, "a", 1.0)
    open_fed(core, "b", 1.0)
    assert core.capacity() == total - 2


def test_an_idle_worker_too_slow_for_real_time_still_takes_one_session(core):
    """Costs over the chunk period: no session fits, yet an idle worker takes one (and no more),
    which the quality controller then runs at its cheapest rung."""
    period = core.info.frames_per_chunk / core.info.fps
    for kind_key in core.work_per_period():
        core.costs.observe(kind_key, 1, 2 * period)
    assert sessions_in_real_time(core.costs, core.work_per_period(), period) == 0
    assert core.capacity() == 1
    open_fed(core, "a", 1.0)
    assert core.capacity() == 0


def test_a_negative_margin_counts_no_real_time_bound(core):
    """Costs no session fits, yet a worker told to count no margin keeps taking sessions: the
    web process's ``max_sessions`` is what bounds them."""
    period = core.info.frames_per_chunk / core.info.fps
    for kind_key in core.work_per_period():
        core.costs.observe(kind_key, 1, 3 * period)
    core.capacity_margin = -1.0
    assert core.real_time_sessions() == 0
    open_fed(core, "a", 1.0)
    open_fed(core, "b", 1.0)
    assert core.capacity() == MOST_SESSIONS - 2


def test_an_idle_worker_forgets_the_load_its_last_sessions_ran_under(core):
    """A load factor learned while sessions ran (the web side taking cores) is dropped once the
    last one closes: an idle worker that kept it could refuse every session and never learn
    that the machine has calmed down."""
    costs = core.costs
    costs.observe(("N",), 1, 0.01)
    costs.set_baseline()
    open_fed(core, "a", 1.0)
    for _ in range(10):
        costs.observe(("N",), 1, 0.03)  # three times the baseline
    assert costs.load > 2.0
    core.close("a")
    assert costs.load == 1.0
    assert costs.estimate(("N",), 1) == pytest.approx(0.01)


def test_the_fast_preset_runs_at_its_own_steps_with_its_own_ladder(micro_pipe):
    cfg = micro_pipe.config.replace(fast_chunk=1, fast_steps=1)
    pipe = type(micro_pipe)(cfg, micro_pipe.models, micro_pipe.device)
    assert (pipe.preset("quality").steps, pipe.preset("fast").steps) == (2, 1)
    core = EngineCore(pipe, describe(pipe), clock=FakeClock(), costs=CostModel(prior_s=0.01))
    assert [q.steps for q in core.presets["quality"]] == [2, 2, 1]
    assert [q.steps for q in core.presets["fast"]] == [1]  # no step left to give up
    assert [key[1] for key in core.work_per_period("fast")] == [1]
    calls = []
    hook = pipe.models.dit.register_forward_hook(lambda *_: calls.append(1))
    try:
        open_fed(core, "a", 2.0, preset="fast")
        outcome = core.step()
    finally:
        hook.remove()
    assert outcome.batch == ("a",) and outcome.frames["a"]
    assert len(calls) == 2  # one denoising step, then the history pass


def test_steps_asked_for_by_the_caller_hold_for_every_preset(micro_weights):
    from engine.config import get_config
    from engine.pipeline import Pipeline

    cfg = get_config("micro").replace(fast_chunk=1, fast_steps=1)
    pipe = Pipeline.from_config(cfg, steps=3, weights=micro_weights)
    assert (pipe.preset("quality").steps, pipe.preset("fast").steps) == (3, 3)


def test_sessions_rendered_differently_run_apart_and_are_costed_apart(core):
    open_fed(core, "decoded", 3.0, seed=0)
    open_fed(core, "drawn", 3.0, seed=1, drawn=True)
    by_session = {c.session: c for c in core.candidates(core.clock())}
    assert by_session["decoded"].cost_key[-1] == "decoded" and by_session["drawn"].cost_key[-1] == "drawn"
    assert by_session["decoded"].key != by_session["drawn"].key
    assert len(core.step().batch) == 1  # one render kind per forward


def test_capacity_is_counted_per_render_kind_from_what_each_costs(core):
    period = core.period_s()
    for key in core.work_per_period(render="decoded"):
        core.costs.observe(key, 1, period / 2)  # two sessions fit (less the margin: one)
    for key in core.work_per_period(render="drawn"):
        core.costs.observe(key, 1, period / 10)
    by_render = core.real_time_by_render()
    assert set(by_render) == {"decoded", "drawn", "photo"}
    assert by_render["drawn"] > by_render["decoded"] >= 1
    assert core.real_time_sessions() == by_render["decoded"]  # the worker's default render


def test_sessions_drawn_from_the_latents_run_at_the_configured_redrawn_steps(micro_pipe):
    from engine.photo.latent_reader import LatentMotionReader

    cfg = micro_pipe.config.replace(fast_chunk=1, fast_steps=2, redrawn_steps=1)
    pipe = type(micro_pipe)(cfg, micro_pipe.models, micro_pipe.device)
    assert pipe.preset("fast").steps_for(Render.DRAWN) == 2  # no latent reader: motion read off decoded frames
    pipe.latent_reader = LatentMotionReader(channels=cfg.vae.latent_channels, frames=cfg.vae.temporal_down)
    core = EngineCore(pipe, describe(pipe), clock=FakeClock(), costs=CostModel(prior_s=0.01))
    assert [q.steps for q in core.ladders[Render.DECODED]["fast"]] == [2, 1]
    assert [q.steps for q in core.ladders[Render.DRAWN]["fast"]] == [1]
    kinds = [(key[0], key[1]) for key in core.work_per_period("fast", Render.DRAWN)]
    assert kinds == [("N", 1), ("draw", 0)], "and its frames drawn"
    open_fed(core, "decoded", 2.0, seed=1, preset="fast")
    open_fed(core, "drawn", 2.0, preset="fast", drawn=True)
    keys = {c.session: c.key for c in core.candidates(core.clock())}
    assert (keys["drawn"].steps, keys["decoded"].steps) == (1, 2)
    core.close("decoded")
    calls = []
    hook = pipe.models.dit.register_forward_hook(lambda *_: calls.append(1))
    try:
        outcome = core.step()
        assert outcome.batch == ("drawn",) and len(calls) == 2  # one denoising step, then the history pass
        drawn = core.step()  # its frames drawn one by one, without the DiT
    finally:
        hook.remove()
    shown = [f.index for _, f in drawn.frames["drawn"]]
    assert drawn.batch == ("drawn",) and shown == list(range(len(shown))) and len(calls) == 2
    assert 1 <= len(shown) <= pipe.preset("fast").frames_per_chunk, "the frames due, up to a chunk's"


def test_audio_pushed_again_replaces_what_no_frame_was_made_of(core):
    """A push that starts before the end of what was fed replaces the audio there (a voice fed
    back over silence); frames made earlier keep theirs."""
    core.open("a", SessionSpec(drawn=True), core.slot_frames)
    back = core.sessions["a"].stream.lookahead_samples
    assert back > 0
    core.push("a", 0, np.zeros(16000, np.float32))
    frames = []
    while (outcome := core.step()) is not None:
        give_back(core, outcome)
        frames += [f for _, f in outcome.frames["a"]]
    tone = 0.3 * np.sin(np.arange(8000) / 5.0).astype(np.float32)
    core.push("a", 16000 - back, tone)
    assert core.sessions["a"].fed == 16000 - back + tone.size
    assert core.sessions["a"].voiced_until > 16000  # the voice counts from where it was put
    core.push("a", 16000 - back + tone.size, np.zeros(16000, np.float32))
    while (outcome := core.step()) is not None:
        give_back(core, outcome)
        frames += [f for _, f in outcome.frames["a"]]
    timeline = np.concatenate([np.zeros(16000 - back, np.float32), tone, np.zeros(16000, np.float32)])
    assert [f.index for f in frames] == list(range(len(frames))) and len(frames) > 40
    assert frames[(16000 - back) // 640].audio.any() and not frames[(16000 - back) // 640 - 1].audio.any()
    for f in frames:
        np.testing.assert_array_equal(f.audio, timeline[f.sample_index:f.sample_index + f.audio.size])
