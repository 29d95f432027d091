"""The mouth head: openness in [0, 1], shape weights that sum to one, and a file that keeps it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.speech.mouth_head import MouthHead, load_mouth_head


def test_outputs_are_an_opening_and_a_mix_of_shapes() -> None:
    head = load_mouth_head()
    features = np.random.default_rng(0).standard_normal((50, head.weight.shape[1])).astype(np.float32) * 3
    openness, weights = head(features)
    assert openness.shape == (50,) and weights.shape == (50, 4)
    assert openness.min() >= 0.0 and openness.max() <= 1.0
    assert weights.min() >= 0.0
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5)


def test_a_saved_head_reads_the_same_even_from_a_transposed_array(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    head = MouthHead(rng.standard_normal((8, 5)).astype(np.float32).T, rng.standard_normal(5).astype(np.float32))
    head.save(tmp_path / "head.safetensors")
    back = MouthHead.load(tmp_path / "head.safetensors")
    features = rng.standard_normal((7, 8)).astype(np.float32)
    np.testing.assert_array_equal(back.weight, head.weight)
    for a, b in zip(back(features), head(features), strict=True):
        np.testing.assert_array_equal(a, b)
