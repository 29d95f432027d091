"""Enrolment time and size of personal avatars for clips of several lengths.

    python bench/enrol.py [--seconds 10,60,300] [--portrait christophe_henner]

Each clip is a real test portrait (``engine/portraits``) talking through the photo rig,
encoded as H.264 at 720² (``tests/personal_helpers.py``); the enrolment is timed (wall and
this process's CPU), and the avatar stored in a temporary store to read its size on disk.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the project before tests/engine, a folder of the same name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", default="10,60,300", help="clip lengths, comma-separated")
    parser.add_argument("--portrait", default="christophe_henner")
    args = parser.parse_args(argv)

    from personal_helpers import jaw_track, write_footage

    from engine.eval.mouths import portraits
    from engine.face.rig import PhotoRig
    from engine.personal.enroll import enroll
    from engine.personal.store import AvatarStore
    from engine.photo.avatar import photo_avatar

    photo = photo_avatar(dict(portraits())[args.portrait])
    rig = PhotoRig.from_photo(photo.image, photo.face)
    with tempfile.TemporaryDirectory() as tmp:
        store = AvatarStore(Path(tmp) / "store")
        for seconds in (float(s) for s in args.seconds.split(",")):
            clip = Path(tmp) / f"clip{seconds:g}.mp4"
            write_footage(clip, rig, jaw_track(seconds, seed=int(seconds)), canvas=720, marked=False)
            wall, cpu = time.perf_counter(), time.process_time()
            avatar, report = enroll(clip)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            meta = store.save(f"c{int(seconds)}", avatar, report)
            print(json.dumps({"seconds": seconds, "file_mb": round(clip.stat().st_size / 2**20, 1),
                              "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "entries": report.entries,
                              "coverage": report.coverage, "disk_kb": round(meta["disk_bytes"] / 1024)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
