"""``avatar bench --sessions``: sessions of each render kind through one engine core."""

from __future__ import annotations

from engine.batch import Render
from engine.cli import main
from engine.service.bench import format_sessions, run_sessions_bench


def test_drawn_sessions_bench_reports_their_stages_and_batches(micro_pipe) -> None:
    result = run_sessions_bench(micro_pipe, 2, seconds=1.0, render=Render.DRAWN, preset="fast")
    assert result.render == "drawn" and result.preset == "fast" and result.sessions == 2
    assert result.aggregate_fps > 0 and len(result.session_rtf) == 2 and result.batch_mean > 1.0
    assert "redraw" in result.stage_ms and "a2v" in result.stage_ms  # the drawer ran, after the DiT
    text = format_sessions([result])
    assert "fast preset, drawn frames" in text and "redraw" in text


def test_photo_sessions_are_drawn_at_the_photos_size(micro_pipe) -> None:
    result = run_sessions_bench(micro_pipe, 1, seconds=0.5, render=Render.PHOTO)
    assert result.render == "photo" and result.stage_ms["redraw"] > 0


def test_render_without_sessions_is_a_one_line_error(capsys) -> None:
    assert main(["bench", "--config", "micro", "--render", "drawn"]) == 2
    assert "--render and --preset go with --sessions" in capsys.readouterr().err
