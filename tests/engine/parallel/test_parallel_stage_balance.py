"""An engine spread over pipeline stages without given boundaries balances them from a short
measured run before it serves (two gloo ranks, a four-block ``micro``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from parallel_helpers import deep_micro, save_living

from engine.parallel.build import build_pipeline
from engine.parallel.pipeline_stages import block_seconds
from engine.parallel.plan import ParallelPlan

pytestmark = pytest.mark.usefixtures("one_thread")


def stage_of(context) -> tuple[list[int], int]:
    trunk = context.pipe.models.dit.trunk
    return list(trunk.blocks), sum(trunk.in_flight.values())


def test_stages_without_boundaries_start_balanced_by_a_measured_run(tmp_path: Path) -> None:
    weights = save_living(deep_micro(), tmp_path, seed=4)
    engine = build_pipeline(ParallelPlan(pipeline=2), name=deep_micro(), weights=str(weights), threads=1)
    try:
        (first, ran), (second, _) = engine.call(stage_of)
        assert first and second and first + second == [0, 1, 2, 3]
        assert ran > 0  # forwards ran before it served: the warm-up on the even split
        assert all(t is None for t in engine.call(block_seconds)[0])  # their times used by the rebalance, then reset
    finally:
        assert engine.close() == [0]
