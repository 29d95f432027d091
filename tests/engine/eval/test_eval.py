"""Metric sanity checks (issue 4): the renderer's own video scores near perfect, and a
frozen, shuffled, wrong-identity or seam-broken video scores clearly worse."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from engine.eval import metrics
from engine.eval.material import Clip, make_clip
from engine.eval.probe import PROBE_PATH, load_probe
from engine.frames import PublishedFrame
from engine.puppet import Identity, face_track_from_audio, reference_image, render_video
from engine.puppet.stream import face_track_from_mouth
from engine.train.frame_readers import HELD_OUT_SEED
from engine.train.probe import probe_dataset, train_openness_probe

SR = 16000
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


def _identity(k: int) -> Identity:
    return Identity.sample(np.random.default_rng(HELD_OUT_SEED + k), name=f"test{k}")


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """The eval code is small-tensor work; one thread avoids fighting whatever else runs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    """Held-out speech (two espeak-ng sentences with pauses), about 9 s."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    return make_clip(0, SR).pcm


@pytest.fixture(scope="module")
def talking(speech: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(video, ground-truth openness, reference) at 256x256 for three held-out identities."""
    out = []
    for k in range(3):
        ident = _identity(k)
        states = face_track_from_audio(speech, SR, 25, seed=k)
        out.append((render_video(ident, states, 256), np.array([s.openness for s in states]),
                    reference_image(ident, 256)))
    return out


@pytest.fixture(scope="module")
def small_video(speech: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A 64x64 talking video (with blinks and head motion) and its reference."""
    ident = _identity(5)
    return render_video(ident, face_track_from_audio(speech, SR, 25, seed=5), 64), reference_image(ident, 64)


# --- mouth-openness probe --------------------------------------------------------------


def test_shipped_probe_is_small_and_records_its_recipe() -> None:
    assert PROBE_PATH.stat().st_size < 1_000_000
    with safe_open(str(PROBE_PATH), "pt") as f:
        meta = f.metadata()
    assert {"seed", "identities", "per_identity", "steps", "heldout_mae"} <= set(meta)


def test_probe_reads_openness_on_held_out_identities() -> None:
    x, y = probe_dataset(range(HELD_OUT_SEED + 100, HELD_OUT_SEED + 106), 16, seed=123)
    with torch.no_grad():
        pred = load_probe()(x).clamp(0.0, 1.0).numpy()
    mae = float(np.abs(pred - y.numpy()).mean())
    print(f"probe on 96 frames of 6 unseen identities: MAE {mae:.3f}, r {metrics.pearson(pred, y.numpy()):.3f}")
    assert mae < 0.1
    assert metrics.pearson(pred, y.numpy()) > 0.9


def test_probe_training_is_reproducible_from_its_seed(tmp_path: Path) -> None:
    kwargs = {"identities": 3, "per_identity": 2, "steps": 3, "heldout_identities": 1, "log": False}
    a = train_openness_probe(7, tmp_path / "a.safetensors", **kwargs)
    b = train_openness_probe(7, tmp_path / "b.safetensors", **kwargs)
    wa, wb = load_file(str(tmp_path / "a.safetensors")), load_file(str(tmp_path / "b.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert a["heldout_mae"] == b["heldout_mae"]


# --- lip sync ---------------------------------------------------------------------------


def test_lag_convention_on_synthetic_series() -> None:
    truth = np.random.default_rng(0).random(200)
    late = np.concatenate([np.zeros(3), truth[:-3]])  # the mouth moves 3 frames after the audio
    res = metrics.lip_sync_series(late, truth)
    assert res["best_lag"] == 3 and res["r_at_best_lag"] > 0.99
    assert metrics.lip_sync_series(truth, truth) == {"pearson_r": 1.0, "best_lag": 0, "r_at_best_lag": 1.0}
    assert metrics.lip_sync_series(np.full(200, 0.4), truth)["r_at_best_lag"] == 0.0


def test_renderer_lip_syncs_near_perfectly(talking: list) -> None:
    scores = [metrics.lip_sync(video, gt, ref) for video, gt, ref in talking]
    print("renderer lip sync r per identity:", [round(s["pearson_r"], 3) for s in scores])
    assert np.mean([s["pearson_r"] for s in scores]) > 0.95
    assert all(s["pearson_r"] > 0.9 and s["best_lag"] == 0 for s in scores)


def test_frozen_and_shuffled_videos_lose_lip_sync(talking: list) -> None:
    video, gt, ref = talking[0]
    frozen = np.repeat(video[len(video) // 2][None], len(video), axis=0)
    shuffled = video[np.random.default_rng(1).permutation(len(video))]
    for bad in (frozen, shuffled):
        res = metrics.lip_sync(bad, gt, ref)
        assert abs(res["pearson_r"]) < 0.3 and res["r_at_best_lag"] < 0.3


def test_delayed_video_is_caught_by_the_lag(talking: list) -> None:
    video, gt, ref = talking[1]
    late = np.concatenate([np.repeat(video[:1], 2, axis=0), video[:-2]])
    assert metrics.lip_sync(late, gt, ref)["best_lag"] == 2


# --- identity ---------------------------------------------------------------------------


def test_appearance_same_identity_high_and_stable(small_video: tuple) -> None:
    video, ref = small_video
    scores = metrics.appearance_scores(video, ref)
    assert scores.shape == (len(video),) and scores.min() > 0.85
    third = len(video) // 3
    assert 0.95 < metrics.identity_stability(video[:third], video[-third:], ref) < 1.05


def test_wrong_identity_and_drift_score_clearly_lower(small_video: tuple, speech: np.ndarray) -> None:
    video, ref = small_video
    same = metrics.appearance_similarity(video, ref)
    states = face_track_from_audio(speech[: SR * 2], SR, 25, seed=5)
    for k in (6, 7, 8):
        other = render_video(_identity(k), states, 64)
        assert metrics.appearance_similarity(other, ref) < same - 0.3
        assert metrics.identity_stability(video[: len(other)], other, ref) < 0.7
    darker = (video.astype(np.float32) * 0.8).astype(np.uint8)
    assert metrics.identity_stability(video, darker, ref) < 0.95


# --- seams ------------------------------------------------------------------------------


def test_seam_ratio_is_one_on_continuous_video(small_video: tuple) -> None:
    video, _ = small_video
    for period, offset in ((8, 3), (12, 5)):
        boundaries = list(range(offset, len(video), period))
        assert 0.8 < metrics.seam_ratio(video, boundaries) < 1.25
    labels = [f"N{i // 8}" for i in range(len(video))]
    assert metrics.seam_ratio(video, labels) == metrics.seam_ratio(video, list(range(8, len(video), 8)))


def test_seam_ratio_high_with_jumps_at_boundaries(small_video: tuple) -> None:
    video, _ = small_video
    jumpy = video.copy()
    for start in range(0, len(video), 16):  # every other chunk of 8 frames shifted by 2 px
        jumpy[start + 8 : start + 16] = np.roll(video[start + 8 : start + 16], 2, axis=2)
    assert metrics.seam_ratio(jumpy, list(range(8, len(video), 8))) > 2.0


# --- PSNR / SSIM ------------------------------------------------------------------------


def _ssim_reference(x: np.ndarray, y: np.ndarray) -> float:
    """Textbook SSIM of one (H, W, 3) pair with a separable Gaussian, for cross-checking."""
    g = np.exp(-(np.arange(-5, 6) ** 2) / (2 * 1.5**2))
    g /= g.sum()

    def blur(z: np.ndarray) -> np.ndarray:
        z = np.apply_along_axis(lambda v: np.convolve(v, g, "valid"), 1, z)
        return np.apply_along_axis(lambda v: np.convolve(v, g, "valid"), 0, z)

    c1, c2, out = (0.01 * 255) ** 2, (0.03 * 255) ** 2, []
    for c in range(3):
        a, b = x[..., c].astype(np.float64), y[..., c].astype(np.float64)
        ma, mb = blur(a), blur(b)
        va, vb, cov = blur(a * a) - ma**2, blur(b * b) - mb**2, blur(a * b) - ma * mb
        out.append((((2 * ma * mb + c1) * (2 * cov + c2)) / ((ma**2 + mb**2 + c1) * (va + vb + c2))).mean())
    return float(np.mean(out))


def test_psnr_and_ssim_perfect_on_self_and_lower_otherwise(small_video: tuple) -> None:
    video, _ = small_video
    clip = video[:40]
    assert metrics.psnr(clip, clip) == float("inf")
    assert metrics.ssim(clip, clip) == pytest.approx(1.0, abs=1e-6)
    brighter = clip.astype(np.int16) + 1
    assert metrics.psnr(clip, np.clip(brighter, 0, 255).astype(np.uint8)) == pytest.approx(48.13, abs=0.2)
    noisy = np.clip(clip + np.random.default_rng(0).normal(0, 20, clip.shape), 0, 255).astype(np.uint8)
    assert metrics.psnr(clip, noisy) < 25 and metrics.ssim(clip, noisy) < 0.8
    want = np.mean([_ssim_reference(a, b) for a, b in zip(clip[:4], noisy[:4], strict=True)])
    assert metrics.ssim(clip[:4], noisy[:4]) == pytest.approx(want, abs=1e-4)


# --- the evaluate() entry point ------------------------------------------------------------


@needs_espeak
def test_evaluate_returns_json_and_a_table(tmp_path: Path) -> None:
    from engine.eval.run import evaluate, format_table, update_card
    from engine.media.image import load_image
    from engine.pipeline import Pipeline

    pipe = Pipeline.from_config("micro", threads=1)
    result = evaluate(pipe, clips=1, long_minutes=0.06, progress=False, sheet=tmp_path / "sheet.png")
    assert load_image(tmp_path / "sheet.png").shape == (2 * 32, 6 * 32, 3)  # truth over generated, 6 moments
    card = tmp_path / "model_card.json"
    update_card(card, result, "long run")
    short = {**result, "passes": {**result["passes"], "identity_stability": None}}
    short.pop("long")
    update_card(card, short, "short run")
    saved = json.loads(card.read_text())["evaluation"]
    assert saved["long"]["command"] == "long run" and saved["long"]["frames"] == 90
    assert (saved["long"]["preset"], saved["long"]["steps"]) == ("fast", pipe.steps)
    assert saved["clips"]["command"] == "short run" and saved["clips"]["clips"] == 1
    assert saved["clips"]["interp"]["lip_sync"] == result["interp"]["lip_sync"]
    settings = {"steps": pipe.steps, "guidance": pipe.config.audio_guidance, "deblock": list(pipe.config.deblock)}
    assert saved["clips"]["settings"] == settings and saved["long"]["settings"] == settings
    update_card(card, {**short, "interp": {**short["interp"], "clips": []}, "no_interp": {
        **short["no_interp"], "clips": []}}, "fewer clips")
    assert json.loads(card.read_text())["evaluation"]["clips"]["command"] == "short run"
    json.dumps(result, allow_nan=False)
    for label in ("interp", "no_interp", "drawn"):
        res = result[label]
        assert set(res["lip_sync"]) == {"pearson_r", "best_lag", "r_at_best_lag"}
        assert res["seam_ratio"] > 0 and res["psnr"] > 0 and -1 <= res["ssim"] <= 1
    assert result["long"]["frames"] == 90 and result["long"]["identity_stability"] is not None
    assert set(result["passes"]) == {"lip_sync_r", "lip_sync_lag", "seam_ratio", "identity_stability"}
    assert "lip sync r" in format_table(result)
    assert set(result["ceiling"]) == {"autoencoder", "through_sr", "drawn"}
    assert result["drawn"]["appearance"] > 0.9, "drawn frames are the renderer's drawing of the identity"
    assert len(result["ceiling"]["autoencoder"]["clips_r"]) == 1 and "through the autoencoder" in format_table(result)
    # the renderer's frames rebuilt by the autoencoder are scored against themselves too
    assert all(5.0 < result["ceiling"][k]["psnr"] < 60.0 for k in ("autoencoder", "through_sr", "drawn"))
    assert all(-1 <= result["ceiling"][k]["ssim"] < 1 for k in ("autoencoder", "through_sr", "drawn"))
    # another take of the same speech differs (blinks, idle motion) but stays close to the first
    other = result["other_take"]
    assert 15.0 < other["psnr"] < 40.0 and 0.5 < other["ssim"] < 1.0, other
    assert json.loads(card.read_text())["evaluation"]["clips"]["other_take"] == other
    assert "another take" in format_table(result)


def test_cli_flags_and_bad_values() -> None:
    import argparse

    from engine.eval.cli import add_eval_parser

    parser = argparse.ArgumentParser(prog="avatar")
    add_eval_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["eval", "--config", "tiny", "--minutes", "60", "--json", "out.json", "--clips", "3"])
    assert (args.config, args.minutes, args.json, args.clips) == ("tiny", 60.0, "out.json", 3)
    assert args.dtype is None and parser.parse_args(["eval", "--dtype", "float32"]).dtype == "float32"
    assert args.func(parser.parse_args(["eval", "--clips", "0"])) == 2


class _PuppetPipeline:
    """Stands in for a perfect engine: draws the puppet saying the clip's phones (the mouth the
    evaluation takes for the truth), with the face-track seed it uses, so frames should match exactly."""

    def __init__(self, clip: Clip, size: int, interp: bool) -> None:
        from engine.config import get_config

        self.clip, self.identity, self.track_seed, self.size = clip, clip.identity, clip.identity_seed, size
        # no presets
        self.config = get_config("tiny").with_schedule(interp=interp).replace(fast_chunk=None, fast_steps=None)
        self.device, self.steps, self.weights_loaded = "cpu", 0, []
        self.fps, self.sample_rate, self.frame_size = 25, SR, (size, size)

    def render(self, pcm: np.ndarray, reference: np.ndarray, seed: int = 0) -> Iterator[PublishedFrame]:
        states = face_track_from_mouth(self.clip.truth(25), seed=self.track_seed)[: -(-pcm.size // (SR // 25))]
        frames = render_video(self.identity, states, self.size)
        chunk = 16 if self.config.schedule.interp else 12
        for i, rgb in enumerate(frames):
            yield PublishedFrame(i, 25, rgb, np.zeros(SR // 25, np.float32), SR, f"N{i // chunk}")


@needs_espeak
def test_evaluate_scores_a_perfect_engine_as_perfect() -> None:
    from engine.eval.run import evaluate

    clip = make_clip(0, SR)
    pipes = [_PuppetPipeline(clip, 128, interp) for interp in (True, False)]
    result = evaluate(pipes[0], clips=1, long_minutes=0, no_interp=pipes[1], progress=False)  # type: ignore[arg-type]
    for label in ("interp", "no_interp"):
        res = result[label]
        assert res["lip_sync"]["pearson_r"] > 0.95 and res["lip_sync"]["best_lag"] == 0
        assert res["psnr"] is None or res["psnr"] > 50  # None: infinite, frames identical
        assert res["ssim"] == pytest.approx(1.0, abs=1e-3)
        assert 0.7 < res["seam_ratio"] < 1.4 and res["appearance"] > 0.9
    assert result["passes"]["lip_sync_r"] and result["passes"]["lip_sync_lag"]


def test_evaluate_scores_the_fast_preset_at_its_own_chunk_and_steps() -> None:
    from engine.eval.run import card_entry, evaluate, format_table
    from engine.pipeline import Pipeline

    micro = Pipeline.from_config("micro", threads=1)
    pipe = type(micro)(micro.config.replace(fast_chunk=1, fast_steps=1), micro.models, micro.device)
    result = evaluate(pipe, clips=1, long_minutes=0, progress=False)
    assert {"interp", "no_interp", "fast"} <= set(result)
    assert set(result["fast"]["lip_sync"]) == {"pearson_r", "best_lag", "r_at_best_lag"}
    assert result["fast"]["real_time_factor"] > 0
    entry = card_entry(result)
    assert "fast" in entry and "fast" in format_table(result).splitlines()[0]
    assert entry["settings"]["fast_preset"] == {"chunk": 1, "steps": 1}
    # a fast preset equal to the schedule itself is not scored twice
    same = type(micro)(micro.config.replace(fast_chunk=None, fast_steps=None), micro.models, micro.device)
    assert "fast" not in evaluate(same, clips=1, long_minutes=0, progress=False)
