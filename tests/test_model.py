"""The shipped ``tiny`` checkpoint: complete, small, loaded by default and documented by its
model card (data, training time, evaluation). That it animates (the mouth moves while an
utterance plays, not in silence) is checked end to end in ``test_agent_mouth.py``."""

from __future__ import annotations

import json

import pytest

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
    clips = card["evaluation"]["clips"]
    assert clips["clips"] >= 4 and clips["passes"]["seam_ratio"] and clips["passes"]["lip_sync_lag"]
