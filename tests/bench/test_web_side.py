"""bench/web_side.py end to end, briefly: one puppet session, its figures read back from the JSON it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WINDOW_S = 4


def test_one_session_measured(tmp_path):
    out = tmp_path / "web_side.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "web_side.py"), "--sessions", "1", "--warmup", "2",
                          "--window", str(WINDOW_S), "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    [row] = json.loads(out.read_text())
    assert row["sessions"] == 1 and row["viewers"] == 0
    assert row["size"] == [256, 256]
    assert 0 < row["loop_cores"] <= row["process_cores"] < 2
    assert row["threads"]["loop"] == row["loop_cores"]
    assert row["loop_wakes"] >= 75  # at least each picture and voice packet released at its deadline
    [video], [audio] = row["video_frames"], row["audio_frames"]
    assert video >= 0.8 * 25 * WINDOW_S  # the peer decoded the session's 25 fps
    assert audio >= 0.8 * 50 * WINDOW_S  # and its 20 ms voice packets
    assert row["slots"] >= 0.8 * 25 * WINDOW_S and 0 <= row["misses"] <= row["slots"]
    assert "1 session(s), cores by thread: loop" in run.stdout
