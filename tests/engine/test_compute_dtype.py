"""The compute dtype an engine runs in: bf16 where it pays, measured, not guessed."""

from __future__ import annotations

import pytest
import torch

from engine import models
from engine.config import get_config
from engine.models import compute_dtype, cpu_bf16_pays


def test_auto_on_a_cpu_follows_whether_bf16_was_measured_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "cpu_bf16_pays", lambda: True)
    assert compute_dtype("auto", "cpu") == torch.bfloat16
    monkeypatch.setattr(models, "cpu_bf16_pays", lambda: False)
    assert compute_dtype("auto", "cpu") == torch.float32
    assert compute_dtype("auto", "cuda:0") == torch.bfloat16
    assert compute_dtype("float32", "cuda") == torch.float32 and compute_dtype("bfloat16", "cpu") == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype 'half'"):
        compute_dtype("half", "cpu")


def test_the_bf16_probe_times_one_thread_and_gives_the_threads_back() -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    cpu_bf16_pays.cache_clear()
    try:
        assert isinstance(cpu_bf16_pays(), bool)
        assert torch.get_num_threads() == 2
    finally:
        cpu_bf16_pays.cache_clear()
        torch.set_num_threads(before)


def test_the_test_config_runs_float32_on_every_machine() -> None:
    assert compute_dtype(get_config("micro").dtype, "cpu") == torch.float32
    assert get_config("tiny").dtype == "auto"
