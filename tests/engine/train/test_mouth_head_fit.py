"""Fitting the mouth head: ridge sums recover a linear map however the data is split, a noisy
read is widened to its truth's spread, and a training clip's features line up with its truth
frame for frame."""

from __future__ import annotations

import numpy as np
import pytest

from engine.train.mouth_head import RidgeSums, clip_pair, fit


def test_ridge_sums_recover_a_linear_map_however_the_data_comes() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 12)) * rng.uniform(0.1, 5.0, 12) + rng.uniform(-2, 2, 12)
    w, b = rng.standard_normal((5, 12)), rng.standard_normal(5)
    y = x @ w.T + b + 0.01 * rng.standard_normal((3000, 5))
    whole = fit([(x, y)], ridge=1e-3)
    pieces = fit([(x[i:i + 700], y[i:i + 700]) for i in range(0, 3000, 700)], ridge=1e-3)
    np.testing.assert_allclose(whole.weight, w, atol=2e-3)
    np.testing.assert_allclose(whole.bias, b, atol=2e-3)
    np.testing.assert_allclose(pieces.weight, whole.weight, atol=1e-6)
    shrunk = fit([(x, y)], ridge=1e4, stretch=False)
    assert np.abs(shrunk.weight).sum() < 0.5 * np.abs(whole.weight).sum()  # the ridge pulls towards the mean


def test_a_noisy_read_is_widened_to_its_truths_spread() -> None:
    """Least squares on a noisy relation reads narrower than the truth (by r); stretched, the read
    spreads as far as the truth does, and follows it as closely."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4000, 6))
    y = (x @ rng.standard_normal((6, 5)) + 2.0 * rng.standard_normal((4000, 5))) * 0.1 + 0.3
    narrow, wide = fit([(x, y)], stretch=False), fit([(x, y)])
    read = lambda head: x @ head.weight.T + head.bias  # noqa: E731
    assert (read(narrow).std(axis=0) < 0.9 * y.std(axis=0)).all()
    np.testing.assert_allclose(read(wide).std(axis=0), y.std(axis=0), rtol=1e-3)
    np.testing.assert_allclose(read(wide).mean(axis=0), y.mean(axis=0), atol=1e-6)
    for k in range(5):
        assert np.corrcoef(read(wide)[:, k], read(narrow)[:, k])[0, 1] > 0.9999


def test_a_fit_needs_data() -> None:
    with pytest.raises(ValueError, match="two frames"):
        RidgeSums().solve()


def test_a_clip_pairs_each_frame_with_its_truth() -> None:
    rng = np.random.default_rng(1)
    pcm = (0.05 * rng.standard_normal(16000)).astype(np.float32)
    truth = rng.uniform(0, 1, (25, 5))
    features, targets = clip_pair(pcm, truth)
    assert features.shape == (25, 384) and targets is truth
