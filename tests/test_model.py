"""The shipped ``tiny`` checkpoint: complete, small, documented, and it really animates:
lip sync and seams within the issue's thresholds on a held-out identity and sentence."""

from __future__ import annotations

import json

import pytest

from engine.eval.material import make_clip
from engine.eval.run import THRESHOLDS, evaluate_clips
from engine.models import WEIGHTS_DIR
from engine.pipeline import Pipeline

pytestmark = pytest.mark.usefixtures("one_thread")
FOLDER = WEIGHTS_DIR / "tiny"
MODULES = ("audio", "encoder", "dit", "sr", "decoder")


def test_checkpoint_is_complete_small_and_loaded_by_default() -> None:
    files = [FOLDER / f"{name}.safetensors" for name in MODULES]
    assert all(f.is_file() for f in files)
    assert sum(f.stat().st_size for f in files) < 50 * 1024 * 1024
    assert sorted(Pipeline.from_config("tiny").weights_loaded) == sorted(MODULES)


def test_model_card_records_data_training_and_evaluation() -> None:
    card = json.loads((FOLDER / "model_card.json").read_text())
    assert card["config"] == "tiny" and card["data"]["clips"] > 0 and "espeak-ng" in card["data"]["speech"]
    for stage in ("vae", "latents", "dit", "sr"):
        assert card["stages"][stage]["seconds"] > 0
    assert sum(card["stages"][s]["seconds"] for s in card["stages"]) < 2 * 3600  # trains in under 2 hours
    evaluation = card["evaluation"]
    assert evaluation["clips"]["passes"]["lip_sync_r"] and evaluation["clips"]["passes"]["seam_ratio"]
    long = evaluation["long"]
    assert long["minutes"] >= 60 and long["identity_stability"] >= THRESHOLDS["identity_stability_min"]


def test_shipped_model_lip_syncs_a_held_out_clip_without_seams() -> None:
    pipe = Pipeline.from_config("tiny")
    clip = make_clip(7, pipe.sample_rate, seed=3, sentences=1)  # identity and sentence never trained on
    result = evaluate_clips({"interp": pipe}, [clip], seed=3, log=lambda _: None)["interp"]
    sync = result["lip_sync"]
    assert sync["pearson_r"] >= THRESHOLDS["lip_sync_r_min"], sync
    assert abs(sync["best_lag"]) <= THRESHOLDS["lip_sync_max_abs_lag"], sync
    assert result["seam_ratio"] <= THRESHOLDS["seam_ratio_max"], result["seam_ratio"]
    assert result["appearance"] >= THRESHOLDS["appearance_first_min"], result["appearance"]
