"""Pipeline parallelism over two gloo ranks: each holds half the DiT's blocks and their K/V,
micro-batches of a batch in flight between them, boundaries rebalanced from measured block
times. Sessions (N and I chunks, batched, guided) and chunks past latent 10**6 come out as on
one device, before and after a rebalance."""

from __future__ import annotations

import gc
import itertools
from pathlib import Path

import pytest
from parallel_helpers import (
    OneDevice,
    assert_same_run,
    chunks_at_a_million,
    deep_micro,
    max_diff,
    run_sessions,
    save_living,
)

from engine.parallel.build import build_pipeline
from engine.parallel.pipeline_stages import balance, even_boundaries, rebalance_stages
from engine.parallel.plan import ParallelPlan
from engine.pipeline import Pipeline

# Outputs compared with one device's, nothing timed: `make test` runs it beside another test.
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.offline]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def deep_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_living(deep_micro(), tmp_path_factory.mktemp("deep_micro"), seed=4)


@pytest.fixture(scope="module")
def engines(deep_weights: Path):
    build = dict(name=deep_micro(), weights=str(deep_weights), threads=1, guidance=2.0)
    parallel = build_pipeline(ParallelPlan(pipeline=2, microbatches=2, boundaries=(0, 2, 4)), **build)
    yield parallel, Pipeline.from_config(**build)
    assert parallel.close() == [0]


def stage_of(context) -> dict:
    trunk = context.pipe.models.dit.trunk
    return {"blocks": list(trunk.blocks), "in_flight": dict(trunk.in_flight)}


def fake_times(context, seconds: list[float]) -> None:
    """Each rank as if its own blocks had taken ``seconds``."""
    trunk = context.pipe.models.dit.trunk
    trunk.clock.reset()
    for i in trunk.blocks:
        trunk.clock.samples[i].append(seconds[i])


def test_sessions_equal_one_device_with_micro_batches_in_flight(engines, monkeypatch) -> None:
    parallel, single = engines
    got, want = run_sessions(parallel, monkeypatch), run_sessions(single, monkeypatch)
    assert_same_run(got, want)
    stages = parallel.call(stage_of)
    assert [s["blocks"] for s in stages] == [[0, 1], [2, 3]]
    for s in stages:  # two sessions (and guided twins) flowed through both stages together
        assert s["in_flight"].get(2, 0) > 0 and set(s["in_flight"]) <= {1, 2}


def test_each_rank_holds_its_blocks_layers_of_the_rolling_state(engines) -> None:
    parallel, single = engines
    a, b = parallel.open_session(avatar="cleo"), single.open_session(avatar="cleo")
    assert a.state.reference.kv.k.shape[0] == 2 and b.state.reference.kv.k.shape[0] == 4
    assert (a.state.reference.kv.k - b.state.reference.kv.k[:2]).abs().max() <= TOLERANCE


def test_chunks_past_a_million_latents_equal_one_device(engines) -> None:
    parallel, single = engines
    got = parallel.call(chunks_at_a_million)
    assert max_diff(got[0], got[1]) == 0.0
    assert max_diff(got[0], chunks_at_a_million(OneDevice(single))) <= TOLERANCE


def test_rebalanced_boundaries_follow_measured_times_and_keep_the_output(engines, monkeypatch) -> None:
    parallel, single = engines
    gc.collect()  # sessions of earlier tests are gone: their K/V belonged to the old split
    parallel.call(fake_times, [0.003, 0.001, 0.001, 0.001])
    assert rebalance_stages(parallel) == (0, 1, 4)
    assert [s["blocks"] for s in parallel.call(stage_of)] == [[0], [1, 2, 3]]
    got, want = run_sessions(parallel, monkeypatch), run_sessions(single, monkeypatch)
    assert_same_run(got, want)
    keep = parallel.open_session()
    with pytest.raises(RuntimeError, match="close them"):
        rebalance_stages(parallel)
    del keep


def test_balance_minimises_the_slowest_stage() -> None:
    assert balance([1, 1, 1, 1], 2) == (0, 2, 4)
    assert balance([3, 1, 1, 1], 2) == (0, 1, 4)
    assert balance([1, 1, 1, 5], 2) == (0, 3, 4)
    assert balance([2, 2, 1, 1, 1, 1], 3) == (0, 1, 3, 6)
    times = [5, 1, 1, 1, 1, 1, 1, 5]
    b = balance(times, 3)
    assert max(sum(times[x:y]) for x, y in itertools.pairwise(b)) == 6
    assert balance([1] * 5, 5) == (0, 1, 2, 3, 4, 5)
    assert even_boundaries(30, 4) == (0, 8, 15, 22, 30)
    with pytest.raises(ValueError):
        balance([1, 1], 3)
