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


def test_a_real_clips_lip_gap_is_paired_with_the_features_at_its_own_offset() -> None:
    """A clip whose video runs 2 frames behind its audio, with frames lost by the face mesh: each
    target is the gap of the frame whose features go with it, standardised to the synthetic
    truth's spread; shapes are the synthetic head's read; frames without a face are left out."""
    from engine.speech.mouth_head import MouthHead
    from engine.train.mouth_head import real_lip_pair

    rng = np.random.default_rng(5)
    features = rng.standard_normal((300, 8)).astype(np.float32)
    head = MouthHead(rng.standard_normal((5, 8)).astype(np.float32), rng.standard_normal(5).astype(np.float32))
    heard = head.linear(features)[:, 0]
    gap = np.full(300, np.nan)
    gap[2:] = 0.5 + 0.1 * heard[:-2]  # the mouth at t + 2 shows what the audio at t said
    gap[[50, 51, 200]] = np.nan
    x, y = real_lip_pair(features, gap, head, (0.25, 0.2))
    assert len(x) == 300 - 2 - 3
    assert np.corrcoef(head.linear(x)[:, 0], y[:, 0])[0, 1] > 0.999  # paired at the offset
    np.testing.assert_allclose([y[:, 0].mean(), y[:, 0].std()], [0.25, 0.2], atol=0.01)
    np.testing.assert_allclose(y[:, 1:], head.linear(x)[:, 1:], atol=1e-5)
    x0, y0 = real_lip_pair(features, np.full(300, np.nan), head, (0.25, 0.2))
    assert x0.shape == (0, 8) and y0.shape == (0, 5)


def test_real_frames_count_as_their_weight_of_synthetic_ones() -> None:
    from engine.train.mouth_head import sums_of

    rng = np.random.default_rng(6)
    x1, x2 = rng.standard_normal((500, 4)), rng.standard_normal((200, 4)) + 1.0
    y1, y2 = x1 @ rng.standard_normal((4, 2)), x2 @ rng.standard_normal((4, 2))
    merged = sums_of([(x1, y1)]).merged(sums_of([(x2, y2)]), 3.0)
    repeated = sums_of([(x1, y1), (x2, y2), (x2, y2), (x2, y2)])
    for name in ("n", "sx", "sy", "xx", "xy", "yy"):
        np.testing.assert_allclose(getattr(merged, name), getattr(repeated, name))
    mean, sd = sums_of([(x1, y1)]).spread(1)
    assert mean == pytest.approx(y1[:, 1].mean()) and sd == pytest.approx(y1[:, 1].std())


def test_a_real_lips_folder_without_videos_is_refused_in_one_line(tmp_path, capsys) -> None:
    from engine.train.mouth_head import main

    (tmp_path / "notes.txt").write_text("no video here")
    with pytest.raises(SystemExit) as done:
        main(["--clips", "1", "--real-lips", str(tmp_path)])
    assert done.value.code == 2 and f"no videos in {tmp_path}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["--clips", "1", "--real-lips", str(tmp_path / "nowhere")])
    assert done.value.code == 2 and "is not a folder" in capsys.readouterr().err


def test_a_heard_copy_keeps_the_lips_in_time_with_its_audio() -> None:
    """Bursts of a tone where the lips are apart: in every copy, warped or not, the loud frames
    are the frames whose gap is open, and frames the face mesh lost stay lost."""
    from engine.train.mouth_head import heard_copy

    fps, frames = 25, 150
    spf = 16000 // fps
    gap = np.full(frames, 0.02)
    for start in range(10, frames - 20, 23):
        gap[start:start + 8] = 0.3
    gap[100:103] = np.nan
    t = np.arange(frames * spf) / 16000
    pcm = (0.3 * np.sin(2 * np.pi * 220 * t) * np.repeat(np.nan_to_num(gap, nan=0.02) > 0.1, spf)).astype(np.float32)
    rng = np.random.default_rng(3)
    for warped in (False, True, True):
        copy, copy_gap = heard_copy(rng, pcm, gap, warped)
        n = len(copy_gap)
        assert abs(len(copy) / spf - n) < 1 and (n == frames) != warped
        loud = np.sqrt(np.mean(copy[: n * spf].reshape(n, spf) ** 2, axis=1))
        face = ~np.isnan(copy_gap)
        assert np.corrcoef(loud[face], copy_gap[face])[0, 1] > 0.8
        assert 0 < (~face).sum() <= 4
