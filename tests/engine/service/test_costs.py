"""Cost model: EWMA per (key, batch size), estimates for unmeasured sizes and keys, stage figures."""

from __future__ import annotations

import json

import pytest

from engine.service.costs import CostModel, from_measured, kind_of, label


def test_first_observation_is_the_estimate_then_an_ewma() -> None:
    costs = CostModel(alpha=0.5)
    costs.observe("N", 1, 0.100)
    assert costs.estimate("N", 1) == pytest.approx(0.100)
    costs.observe("N", 1, 0.200)
    assert costs.estimate("N", 1) == pytest.approx(0.150)
    costs.observe("N", 1, 0.150)
    assert costs.estimate("N", 1) == pytest.approx(0.150)
    assert costs.count("N", 1) == 3
    assert costs.count("N", 2) == 0


def test_ewma_follows_a_step_in_cost() -> None:
    costs = CostModel(alpha=0.2)
    for _ in range(50):
        costs.observe("N", 1, 0.1)
    for _ in range(30):
        costs.observe("N", 1, 0.3)
    assert costs.estimate("N", 1) == pytest.approx(0.3 - 0.2 * 0.8**30)


def test_interpolates_linearly_between_measured_sizes() -> None:
    costs = CostModel()
    costs.observe("N", 1, 0.010)
    costs.observe("N", 5, 0.018)
    assert [round(costs.estimate("N", n), 6) for n in range(1, 6)] == [0.010, 0.012, 0.014, 0.016, 0.018]


def test_extrapolates_along_the_two_largest_measured_sizes() -> None:
    costs = CostModel()
    costs.observe("N", 1, 0.013)  # off the line of the two largest: ignored above them
    costs.observe("N", 2, 0.014)
    costs.observe("N", 4, 0.018)
    assert costs.estimate("N", 10) == pytest.approx(0.030)
    assert costs.estimate("N", 5) == pytest.approx(0.020)


def test_one_measured_size_scales_up_without_batching_gain_and_down_not_at_all() -> None:
    costs = CostModel()
    costs.observe("N", 2, 0.020)
    assert costs.estimate("N", 6) == pytest.approx(0.060)
    assert costs.estimate("N", 1) == pytest.approx(0.020)


def test_below_the_smallest_measured_size_follows_the_line_within_bounds() -> None:
    assert from_measured({2: 0.014, 4: 0.018}, 1) == pytest.approx(0.012)
    # A steep line would go below the proportional share; it is held at c * n / b.
    assert from_measured({2: 0.010, 3: 0.030}, 1) == pytest.approx(0.005)


def test_a_batch_never_costs_less_than_a_measured_smaller_batch() -> None:
    noisy = {2: 0.020, 4: 0.016}  # the larger batch happened to measure cheaper
    assert from_measured(noisy, 3) == pytest.approx(0.020)
    assert from_measured(noisy, 8) == pytest.approx(0.020)
    assert from_measured(noisy, 4) == pytest.approx(0.016)  # a measured value is returned as measured


def test_unmeasured_key_uses_the_mean_of_its_kind_then_the_prior() -> None:
    costs = CostModel(prior_s=0.5)
    costs.observe(("N", 3, True), 1, 0.30)
    costs.observe(("N", 2, True), 1, 0.10)
    costs.observe(("N", 2, True), 2, 0.12)
    # Batch 2: N/3 scales without gain (0.60), N/2 is measured (0.12): the mean.
    assert costs.estimate(("N", 1, False), 2) == pytest.approx(0.36)
    assert costs.estimate(("N", 1, False), 1) == pytest.approx(0.20)
    assert costs.estimate(("I", 1, False), 3) == pytest.approx(1.5)


def test_custom_kind_groups_keys() -> None:
    costs = CostModel(kind=lambda key: "all")
    costs.observe("N", 1, 0.2)
    costs.observe("I", 1, 0.4)
    assert costs.estimate("X", 1) == pytest.approx(0.3)


def test_unknown_key_without_prior_raises() -> None:
    costs = CostModel()
    costs.observe(("N", 1), 1, 0.1)
    with pytest.raises(KeyError):
        costs.estimate(("I", 1), 1)


@pytest.mark.parametrize("batch_size, seconds", [(0, 0.1), (1, -0.1), (1, float("nan"))])
def test_bad_observations_are_refused(batch_size: int, seconds: float) -> None:
    with pytest.raises(ValueError):
        CostModel().observe("N", batch_size, seconds)
    with pytest.raises(ValueError):
        CostModel().observe_stages("N", batch_size, {"dit": seconds})


def test_stage_ms_is_the_per_session_mean_over_calls() -> None:
    costs = CostModel()
    costs.observe_stages("N", 1, {"dit": 0.010, "vae": 0.004})
    costs.observe_stages("N", 2, {"dit": 0.016, "vae": 0.004})
    costs.observe_stages("N", 2, {"dit": 0.016, "vae": 0.004})
    # dit: one call at 10 ms per session, two at 8 ms per session.
    assert costs.stage_ms() == pytest.approx({"dit": (10 + 8 + 8) / 3, "vae": (4 + 2 + 2) / 3})
    assert costs.count("N", 1) == 0  # stages alone do not feed the estimates


def test_snapshot_is_json_with_estimates_counts_and_stages() -> None:
    costs = CostModel()
    costs.observe(("N", 3, True), 2, 0.0125)
    costs.observe(("N", 3, True), 1, 0.010)
    costs.observe(("N", 3, True), 1, 0.010)
    costs.observe_stages(("N", 3, True), 1, {"dit": 0.006})
    snap = json.loads(json.dumps(costs.snapshot()))
    assert snap == {
        "costs": {"N/3/True": {"1": {"estimate_ms": 10.0, "count": 2}, "2": {"estimate_ms": 12.5, "count": 1}}},
        "stage_ms": {"dit": 6.0},
        "load": 1.0,
    }


def test_a_slower_machine_scales_the_sizes_not_run_since_calibration() -> None:
    """Calibration measured batches of 1 and 2; live, only batches of 1 run, 50% slower (the web
    process took a core): the batch of 2 is estimated 50% dearer too, keeping its batching gain."""
    costs = CostModel(alpha=0.5, load_alpha=0.5)
    costs.observe("N", 1, 0.010)
    costs.observe("N", 2, 0.016)
    costs.set_baseline()
    assert costs.load == 1.0
    for _ in range(30):
        costs.observe("N", 1, 0.015)
    assert costs.load == pytest.approx(1.5)
    assert costs.estimate("N", 1) == pytest.approx(0.015)
    assert costs.estimate("N", 2) == pytest.approx(0.024)
    assert costs.estimate("N", 4) == pytest.approx(1.5 * from_measured({1: 0.010, 2: 0.016}, 4))
    assert costs.snapshot()["load"] == 1.5


def test_one_stalled_call_moves_the_load_as_a_three_times_slower_one() -> None:
    costs = CostModel(alpha=1.0, load_alpha=1.0)
    costs.observe("N", 1, 0.010)
    costs.set_baseline()
    costs.observe("N", 1, 1.0)  # 100x: a stall
    assert costs.load == pytest.approx(3.0)
    costs.observe("N", 1, 0.0001)
    assert costs.load == pytest.approx(1 / 3)


def test_keys_without_a_baseline_use_their_own_measurements() -> None:
    costs = CostModel(alpha=1.0)
    costs.observe("N", 1, 0.010)
    costs.set_baseline()
    costs.observe("I", 1, 0.004)  # first seen after calibration: measured, not scaled
    costs.observe("N", 1, 0.020)
    assert costs.load == pytest.approx(2.0)
    assert costs.estimate("I", 1) == pytest.approx(0.004)
    assert costs.estimate("N", 1) == pytest.approx(0.020)


def test_kind_and_label_of_keys() -> None:
    assert kind_of(("I", 2, False)) == "I"
    assert kind_of("N") == "N"
    assert label(("I", 2, False)) == "I/2/False"
    assert label(7) == "7"


def test_a_model_from_another_workers_calibration_estimates_as_it_did() -> None:
    """A replacement worker starts from its predecessor's calibration: the same baseline, the same
    estimates, its load back at 1, and it hands the same calibration on."""
    measured = CostModel(prior_s=0.2)
    for seconds in (0.05, 0.04, 0.045):
        measured.observe(("N", 1), 1, seconds)
        measured.observe(("N", 1), 2, 2 * seconds * 0.8)
    measured.observe(("draw", 0), 1, 0.012)
    measured.set_baseline()
    measured.observe(("N", 1), 1, 0.09)  # live load after calibration: not part of it
    assert measured.load > 1
    again = CostModel.from_calibration(measured.calibration(), prior_s=0.2)
    assert again.calibration() == measured.calibration()
    assert again.load == 1.0
    for key, size in ((("N", 1), 1), (("N", 1), 2), (("N", 1), 4), (("draw", 0), 1), (("draw", 3), 1)):
        assert again.estimate(key, size) == pytest.approx(measured.estimate(key, size) / measured.load), key
    assert CostModel.from_calibration({}, prior_s=0.2).estimate(("N", 1), 2) == pytest.approx(0.4)
