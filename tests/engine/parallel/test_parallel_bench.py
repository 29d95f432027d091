"""``avatar bench`` with the multi-device flags runs two gloo ranks here (or one process for
offload and the decoder's own device) and reports what the issue asks: fps, first frame,
time per stage, peak memory per rank, model-switch waits, ``world_size`` and ``max_abs_diff``
against the one-device run of the same audio and seed. GPU hygiene changes nothing on a CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from parallel_helpers import run_sessions

from engine.cli import main
from engine.parallel.hygiene import FEATURES, apply_hygiene
from engine.pipeline import Pipeline

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("flags, world", [
    (["--sequence-parallel", "2"], 2), (["--pipeline-parallel", "2"], 2), (["--shard", "2"], 2),
    (["--offload"], 1), (["--decoder-device", "cpu"], 1),
], ids=["sequence", "pipeline", "shard", "offload", "decoder-device"])
def test_bench_reports_the_parallel_figures(flags: list[str], world: int, micro_weights: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "bench.json"
    code = main(["bench", "--config", "micro", "--device", "cpu", "--weights", str(micro_weights), "--threads", "1",
                 "--seconds", "1.5", "--json", str(out), *flags])
    assert code == 0
    r = json.loads(out.read_text())
    assert r["world_size"] == world and r["frames"] == 38 and r["fps"] > 0 and r["first_frame_s"] > 0
    assert 0 <= r["max_abs_diff"] <= 1e-4 and r["max_frame_diff"] <= 1 and r["single_fps"] > 0
    assert set(r["stage_ms"]["N"]) >= {"context", "a2v"}
    assert len(r["peak_memory_bytes"]) == world and all(v > 0 for v in r["peak_memory_bytes"].values())
    if "--offload" in flags:
        assert {"dit→sr", "sr→decoder", "decoder→dit"} <= set(r["switch_ms"])
    if "--pipeline-parallel" in flags:
        assert r["stage_boundaries"] == [0, 1, 2] and len(r["rank_block_ms"]) == 2 and min(r["rank_block_ms"]) > 0
    text = capsys.readouterr().out
    assert "max |diff| vs one device" in text and "peak memory rank 0" in text


@pytest.mark.parametrize("argv, message", [
    (["--sequence-parallel", "2", "--pipeline-parallel", "2"], "does not combine"),
    (["--shard", "2", "--sequence-parallel", "4"], "same size"),
    (["--offload", "--shard", "2"], "offload"),
    (["--config", "xl"], "CUDA devices only"),
    (["--hygiene", "fast"], "unknown fast"),
    (["--sessions", "2", "--shard", "2"], "one device"),
])
def test_bench_refuses_what_cannot_run(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", "--config", "micro", *argv]) == 2
    assert message in capsys.readouterr().err


def test_gpu_hygiene_leaves_a_cpu_engine_as_it_is(micro_weights: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = Pipeline.from_config("micro", weights=str(micro_weights))
    plain = run_sessions(pipe, monkeypatch)
    assert apply_hygiene(pipe, FEATURES) == ()
    assert pipe.a2v.keep_on_device is False and pipe.models.dit.blocks[0]._compiled_call_impl is None
    pipe.a2v.keep_on_device = True  # the CUDA path that keeps latents where the DiT made them
    kept = run_sessions(pipe, monkeypatch)
    assert all((a - b).abs().max() == 0 for a, b in zip(plain.video, kept.video, strict=True))
    with pytest.raises(ValueError, match="unknown"):
        apply_hygiene(pipe, ["warp"])
