"""Scheduler, quality controller and capacity figure, on a fake clock.

Unit cases pin which candidates form a batch; simulations drive a worker loop in which
each batch advances the clock by its scripted true cost and feeds the cost model, with
chunks released every period and due a fixed time after release.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import pytest

from engine.service.costs import CostModel
from engine.service.scheduler import (
    Candidate,
    QualityChange,
    QualityController,
    plan_all,
    plan_batch,
    project_slack,
    sessions_in_real_time,
)

PERIOD = 0.64


def linear(costs: CostModel, key: Hashable, base: float, per: float) -> CostModel:
    """Measure ``key`` at batch 1 and 2 on the line base + per * n, so estimates follow it exactly."""
    for n in (1, 2):
        costs.observe(key, n, base + per * n)
    return costs


def cand(session: str, deadline: float, key: Hashable = "k", speaking: bool = True) -> Candidate:
    return Candidate(session, key, key, deadline, speaking)


def names(batch) -> list[str]:
    return [m.session for m in batch.members]


# ---- plan_batch ---------------------------------------------------------------------------


def test_nothing_to_run() -> None:
    assert plan_batch(0.0, [], CostModel(prior_s=0.1)) is None


def test_speaking_by_earliest_deadline_then_idle_by_earliest_deadline() -> None:
    costs = CostModel(prior_s=0.01)
    pending = [
        cand("s3", 3.0, "a"), cand("i2", 0.7, "b", speaking=False), cand("s1", 1.0, "c"),
        cand("i1", 0.5, "d", speaking=False), cand("s2", 2.0, "e"),
    ]
    order = [names(b) for b in plan_all(0.0, pending, costs)]
    assert order == [["s1"], ["s2"], ["s3"], ["i1"], ["i2"]]
    assert names(plan_batch(0.0, pending, costs)) == ["s1"]


def test_same_key_joins_and_another_key_never_does() -> None:
    costs = linear(linear(CostModel(), "k", 0.1, 0.1), "m", 0.0, 0.001)
    pending = [cand("a", 1.0), cand("x", 1.0, "m"), cand("b", 1.1), cand("y", 0.9, "m"), cand("c", 1.2)]
    batch = plan_batch(0.0, pending, costs)
    assert names(batch) == ["y", "x"]  # y is the most urgent; x shares its key, a/b/c do not
    rest = plan_batch(0.0, [c for c in pending if c.key == "k"], costs)
    assert names(rest) == ["a", "b", "c"]
    assert rest.start == 0.0
    assert rest.estimate_s == pytest.approx(0.4)
    assert rest.finish == pytest.approx(0.4)


def test_max_batch_caps_the_members() -> None:
    costs = linear(CostModel(), "k", 0.0, 0.01)
    pending = [cand(f"s{i}", 10.0 + i) for i in range(6)]
    assert names(plan_batch(0.0, pending, costs, max_batch=4)) == ["s0", "s1", "s2", "s3"]
    with pytest.raises(ValueError):
        plan_batch(0.0, pending, costs, max_batch=0)


def test_joining_stops_before_a_member_would_miss() -> None:
    costs = linear(CostModel(), "k", 0.1, 0.1)  # batch of n: 0.1 + 0.1 n
    pending = [cand("a", 0.35), cand("b", 10.0), cand("c", 10.0), cand("d", 10.0)]
    assert names(plan_batch(0.0, pending, costs)) == ["a", "b"]  # a third member: a done at 0.4
    assert names(plan_batch(0.0, pending, costs, margin_s=0.1)) == ["a"]  # 0.3 > 0.35 - 0.1


def test_batch_is_split_when_joining_would_make_the_next_speaking_session_miss() -> None:
    costs = linear(linear(CostModel(), "k", 0.1, 0.1), "m", 0.1, 0.1)  # x alone: 0.2
    pending = [cand("a", 0.5), cand("x", 0.55, "m"), cand("b", 10.0), cand("c", 10.0)]
    batch = plan_batch(0.0, pending, costs)
    assert names(batch) == ["a", "b"]  # with c: done at 0.4, x then done at 0.6 > 0.55
    order = plan_all(0.0, pending, costs)
    assert [names(b) for b in order] == [["a", "b"], ["x"], ["c"]]
    slack = project_slack(0.0, pending, costs)
    assert slack == pytest.approx({"a": 0.2, "b": 9.7, "x": 0.05, "c": 9.3})


def test_a_session_that_would_miss_anyway_does_not_stop_the_batch() -> None:
    costs = linear(linear(CostModel(), "k", 0.1, 0.1), "m", 0.1, 0.1)
    # a is late on its own (0.2 > 0.15). x makes 0.45 after a alone (0.4), not after a and b (0.5).
    saved = [cand("a", 0.15), cand("x", 0.45, "m"), cand("b", 10.0), cand("c", 10.0)]
    assert names(plan_batch(0.0, saved, costs)) == ["a"]
    # Due at 0.3, x misses even after a alone: it does not hold the batch back.
    doomed = [cand("a", 0.15), cand("x", 0.3, "m"), cand("b", 10.0), cand("c", 10.0)]
    assert names(plan_batch(0.0, doomed, costs)) == ["a", "b", "c"]


def test_same_key_sessions_are_not_split_off_to_protect_each_other() -> None:
    costs = linear(CostModel(), "k", 0.1, 0.1)
    # Alone, c would make 0.45 after a alone (0.4), not after a batch of a and b (0.5): it joins.
    pending = [cand("a", 0.45), cand("b", 0.45), cand("c", 0.45), cand("d", 0.45)]
    assert names(plan_batch(0.0, pending, costs)) == ["a", "b", "c"]


def test_a_late_head_takes_members_only_while_they_are_no_later_than_alone() -> None:
    costs = linear(CostModel(), "k", 0.1, 0.06)  # 0.16, 0.22, 0.28, 0.34, ...
    # a is late on its own (0.16 > 0.1); b..e would miss their 0.12 anyway. Alone, each would
    # run right after a: done at 0.32. A batch of 3 is done at 0.28, of 4 at 0.34.
    pending = [cand("a", 0.1), cand("b", 0.12), cand("c", 0.12), cand("d", 0.12), cand("e", 0.12)]
    assert names(plan_batch(0.0, pending, costs)) == ["a", "b", "c"]


def test_an_on_time_head_keeps_its_deadline() -> None:
    costs = linear(CostModel(), "k", 0.1, 0.06)
    # a makes 0.2 alone (0.16); any member would make it late (0.22).
    pending = [cand("a", 0.2), cand("b", 0.21), cand("c", 5.0)]
    assert names(plan_batch(0.0, pending, costs)) == ["a"]


def test_idle_sessions_join_a_speaking_batch_only_when_it_costs_nothing_more() -> None:
    costs = CostModel()
    for n, seconds in ((1, 0.2), (2, 0.2), (3, 0.3)):  # batching two is free on this device
        costs.observe("k", n, seconds)
    pending = [cand("s", 1.0), cand("i1", 0.5, speaking=False), cand("i2", 0.6, speaking=False)]
    assert names(plan_batch(0.0, pending, costs)) == ["s", "i1"]
    idle_only = [c for c in pending if not c.speaking] + [cand("i3", 5.0, speaking=False)]
    assert names(plan_batch(0.0, idle_only, costs)) == ["i1", "i2", "i3"]


def test_speaking_members_join_a_speaking_batch_at_extra_cost() -> None:
    costs = linear(CostModel(), "k", 0.1, 0.1)
    pending = [cand("s1", 1.0), cand("i", 0.5, speaking=False), cand("s2", 1.0)]
    assert names(plan_batch(0.0, pending, costs)) == ["s1", "s2"]


# ---- a simulated worker ---------------------------------------------------------------------


class FakeClock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        assert dt >= 0
        self.t += dt


@dataclass
class Stream:
    """One session: chunk j is ready at ``phase + j * PERIOD`` and due ``due_after`` later."""

    session: str
    group: str  # streams of one group at one level share a batched call
    speaking: Callable[[float], bool] = lambda t: True
    phase: float = 0.0
    chunk: int = 0

    def release(self) -> float:
        return self.phase + self.chunk * PERIOD


@dataclass(frozen=True)
class Done:
    session: str
    chunk: int
    speaking: bool
    level: int
    finish: float
    deadline: float

    @property
    def missed(self) -> bool:
        return self.finish > self.deadline + 1e-9


TrueCost = Callable[[Hashable, int], float]


def simulate(streams: list[Stream], true_cost: TrueCost, until: float, costs: CostModel, *,
             due_after: float, quality: QualityController | None = None, margin_s: float = 0.0,
             changes: list[QualityChange] | None = None) -> list[Done]:
    """Run the worker loop until ``until``: project slack, adapt levels (appending to ``changes``),
    plan, run, measure."""
    clock = FakeClock()
    by_name = {s.session: s for s in streams}
    done: list[Done] = []

    def candidates() -> list[Candidate]:
        out = []
        for s in streams:
            if s.release() <= clock.now():
                speaking = s.speaking(s.release())
                level = quality.level(s.session) if quality else 0
                out.append(Candidate(s.session, (s.group, level), (s.group, level, speaking),
                                     s.release() + due_after, speaking))
        return out

    while clock.now() < until:
        if not candidates():
            clock.advance(min(s.release() for s in streams) - clock.now())
            continue
        if quality is not None:
            for session, slack in project_slack(clock.now(), candidates(), costs, margin_s=margin_s).items():
                change = quality.update(session, slack, clock.now())
                if change is not None and changes is not None:
                    changes.append(change)
        batch = plan_batch(clock.now(), candidates(), costs, margin_s=margin_s)
        key = batch.members[0].cost_key
        seconds = true_cost(key, len(batch.members))
        clock.advance(seconds)
        costs.observe(key, len(batch.members), seconds)
        for m in batch.members:
            s = by_name[m.session]
            done.append(Done(m.session, s.chunk, m.speaking, key[1], clock.now(), m.deadline))
            s.chunk += 1
    return done


def missed(done: list[Done], speaking: bool = True) -> set[tuple[str, int]]:
    return {(d.session, d.chunk) for d in done if d.missed and d.speaking == speaking}


def test_idle_sessions_never_make_speaking_ones_miss() -> None:
    # Speaking needs 0.4 s of every 0.64 s period; with the idle group the device is overloaded
    # (0.8 s per period). A speaking chunk waits at most for one idle batch already running.
    def true_cost(key: Hashable, n: int) -> float:
        return 0.1 + 0.1 * n

    def run(with_idle: bool) -> list[Done]:
        streams = [Stream(f"s{i}", "S") for i in range(3)]
        if with_idle:
            streams += [Stream(f"i{i}", "Q", speaking=lambda t: False) for i in range(3)]
        costs = linear(linear(CostModel(), ("S", 0, True), 0.1, 0.1), ("Q", 0, False), 0.1, 0.1)
        return simulate(streams, true_cost, 60.0, costs, due_after=0.85)

    alone, beside = run(False), run(True)
    assert missed(beside) <= missed(alone)
    assert missed(alone) == set()
    speaking_done = {(d.session, d.chunk) for d in beside if d.speaking}
    assert len(speaking_done) >= 3 * int(59.0 / PERIOD)  # speaking kept its real-time pace
    idle_done = [d for d in beside if not d.speaking]
    assert len(idle_done) > 100  # idle sessions were served in the gaps ...
    assert missed(beside, speaking=False)  # ... and they, not the speaking ones, took the overload


def test_degrades_one_level_before_a_miss_happens() -> None:
    # A session turns from idle to speaking at 3 s; speaking at level 0 (0.7 s) cannot make the
    # 0.6 s budget, at level 1 (0.45 s) it can. The cost model knows both from a warm-up.
    table = {0: {False: 0.2, True: 0.7}, 1: {False: 0.15, True: 0.45}}

    def true_cost(key: Hashable, n: int) -> float:
        return table[key[1]][key[2]] * n

    def run(levels: int) -> tuple[list[Done], QualityController]:
        costs = CostModel()
        for level, by_speech in table.items():
            for speaking, seconds in by_speech.items():
                costs.observe(("a", level, speaking), 1, seconds)
        quality = QualityController(up_hold_s=1000.0)
        quality.add("a", levels)
        stream = Stream("a", "a", speaking=lambda t: t >= 3.0)
        return simulate([stream], true_cost, 20.0, costs, due_after=0.6, quality=quality), quality

    fixed, _ = run(levels=1)
    assert len(missed(fixed)) >= 20

    done, quality = run(levels=2)
    assert missed(done) == set()
    assert quality.level("a") == 1
    assert quality.counts() == {"overload": 1, "recovered": 0, "warm_start": 0}
    assert [d.level for d in done if d.speaking] == [1] * len([d for d in done if d.speaking])
    assert all(d.level == 0 for d in done if not d.speaking)


def boundary_run(backoff: float, seconds: float = 600.0) -> tuple[list[QualityChange], QualityController]:
    """Level 0 costs 0.6 s +- 10 ms against a 0.6 s budget; level 1 leaves 0.2 s of slack."""
    rng = random.Random(7)

    def true_cost(key: Hashable, n: int) -> float:
        return 0.4 * n if key[1] == 1 else (0.6 + rng.uniform(-0.01, 0.01)) * n

    costs = CostModel()
    costs.observe(("a", 0, True), 1, 0.6)
    costs.observe(("a", 1, True), 1, 0.4)
    quality = QualityController(backoff=backoff, up_hold_s=3.0, max_hold_s=120.0)
    quality.add("a", 2)
    changes: list[QualityChange] = []
    simulate([Stream("a", "a")], true_cost, seconds, costs, due_after=0.6, quality=quality, changes=changes)
    return changes, quality


def test_no_oscillation_when_costs_hover_at_the_boundary() -> None:
    changes, quality = boundary_run(backoff=2.0)
    assert [c.new - c.old for c in changes] == [(-1) ** i for i in range(len(changes))]
    assert 6 <= len(changes) <= 24  # it keeps trying to recover, ever less often
    assert len([c for c in changes if c.at > 300.0]) <= 6  # at most every max_hold_s, late on
    assert quality.hold("a") == 120.0
    raises = [c.at for c in changes if c.reason == "recovered"]
    assert quality.counts() == {"overload": len(changes) - len(raises), "recovered": len(raises), "warm_start": 0}

    eager, _ = boundary_run(backoff=1.0)
    assert len(eager) > 5 * len(changes)  # without backing off, the same run flaps


# ---- QualityController --------------------------------------------------------------------


def test_lowers_at_once_and_at_most_one_level_per_dwell() -> None:
    q = QualityController(down_dwell_s=1.0)
    q.add("a", 3)
    first = q.update("a", -0.01, 10.0)
    assert (first.session, first.old, first.new, first.reason, first.at) == ("a", 0, 1, "overload", 10.0)
    assert q.update("a", -0.5, 10.5) is None
    assert q.update("a", -0.5, 10.99) is None
    assert q.update("a", -0.5, 11.0).new == 2
    assert q.update("a", -0.5, 20.0) is None  # already at the bottom
    assert q.level("a") == 2
    assert q.counts() == {"overload": 2, "recovered": 0, "warm_start": 0}


def test_raises_only_after_slack_held_above_the_threshold() -> None:
    q = QualityController(up_slack_s=0.1, up_hold_s=3.0)
    q.add("a", 3, start_level=2)
    ticks = [0.5 * i for i in range(30)]
    changes = []
    for t in ticks:
        slack = 0.05 if t == 2.0 else 0.2  # one dip into the dead band restarts the hold
        if (c := q.update("a", slack, t)) is not None:
            changes.append((c.at, c.old, c.new, c.reason))
    assert changes == [(5.5, 2, 1, "warm_start"), (8.5, 1, 0, "warm_start")]
    assert q.level("a") == 0


def test_slack_near_zero_moves_nothing_but_a_real_overload() -> None:
    q = QualityController(up_slack_s=0.1)
    q.add("a", 3)
    rng = random.Random(1)
    changes = [q.update("a", rng.uniform(0.0, 0.09), 0.1 * i) for i in range(5000)]
    assert changes == [None] * 5000
    q2 = QualityController(up_slack_s=0.1, down_dwell_s=1.0, up_hold_s=3.0)
    q2.add("a", 3)
    levels = []
    for i in range(5000):  # slack near zero at level 0, comfortable but below up_slack_s at level 1
        slack = rng.uniform(-0.01, 0.01) if q2.level("a") == 0 else 0.08
        q2.update("a", slack, 0.1 * i)
        levels.append(q2.level("a"))
    assert q2.counts()["overload"] == 1
    assert levels[-1] == 1


def test_a_raise_undone_soon_backs_off_and_a_lasting_one_shortens_the_hold() -> None:
    q = QualityController(down_dwell_s=1.0, up_hold_s=2.0, backoff=2.0, max_hold_s=7.0)
    q.add("a", 2)
    t = 0.0

    def cycle(stay: float) -> None:
        """Overload, good slack until the raise, then ``stay`` seconds at level 0 before the next."""
        nonlocal t
        assert q.update("a", -0.1, t).reason == "overload"
        while q.level("a") == 1:
            t += 0.25
            q.update("a", 0.5, t)
        t += stay

    holds = []
    for stay in (0.5, 0.5, 0.5, 0.5):
        cycle(stay)
        holds.append(q.hold("a"))
    assert holds == [2.0, 4.0, 7.0, 7.0]  # each raise undone within the hold that earned it
    for stay in (10.0, 10.0):  # raises that lasted longer than their hold
        cycle(stay)
        holds.append(q.hold("a"))
    assert q.update("a", -0.1, t).reason == "overload"
    holds.append(q.hold("a"))
    assert holds == [2.0, 4.0, 7.0, 7.0, 7.0, 3.5, 2.0]
    assert q.counts() == {"overload": 7, "recovered": 6, "warm_start": 0}


def test_warm_start_then_recovered_after_an_overload() -> None:
    q = QualityController(up_hold_s=1.0, down_dwell_s=0.5)
    q.add("new", 2, start_level=1)
    assert q.level("new") == 1
    assert q.update("new", 0.5, 0.0) is None
    assert q.update("new", 0.5, 1.0).reason == "warm_start"
    assert q.update("new", -0.1, 5.0).reason == "overload"
    assert q.update("new", 0.5, 6.0) is None
    assert q.update("new", 0.5, 7.0).reason == "recovered"
    assert q.counts() == {"overload": 1, "recovered": 1, "warm_start": 1}


def test_sessions_are_added_and_removed() -> None:
    q = QualityController()
    with pytest.raises(ValueError):
        q.add("a", 2, start_level=2)
    q.add("a", 1)
    assert q.update("a", -1.0, 0.0) is None  # one level: nothing to lower
    q.remove("a")
    q.remove("a")
    with pytest.raises(KeyError):
        q.level("a")


# ---- capacity -----------------------------------------------------------------------------


def test_capacity_from_measured_costs() -> None:
    costs = CostModel()
    for key in ("N", "I"):  # each batch: 10 ms + 2 ms per session, measured at 1 and 2 sessions
        linear(costs, key, 0.010, 0.002)
    # N + I every 0.64 s in 80%: 20 ms + 4 ms * n <= 512 ms.
    assert sessions_in_real_time(costs, ("N", "I"), 0.64) == 123
    assert sessions_in_real_time(costs, ("N",), 0.64) == 251  # 10 + 2 n <= 512
    assert sessions_in_real_time(costs, ("N",), 0.64, margin=0.0) == 256  # 315 fit; the limit holds
    assert sessions_in_real_time(costs, ("N",), 0.64, margin=0.0, limit=400) == 315
    assert sessions_in_real_time(costs, ("N", "I"), 0.02) == 0


def test_capacity_uses_every_measured_size() -> None:
    costs = CostModel()
    for n, ms in ((1, 100.0), (4, 250.0), (8, 600.0)):  # batching helps up to 4, then less
        costs.observe("N", n, ms / 1000)
    # 4: 250, 5: 337.5, 6: 425, 7: 512.5 ms against 512 ms.
    assert sessions_in_real_time(costs, ("N",), 0.64) == 6
    with pytest.raises(ValueError):
        sessions_in_real_time(costs, (), 0.64)
