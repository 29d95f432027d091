"""Page load -> first decoded frame, from a cold Chromium, against ``avatar serve`` in its own process.

Each run launches a new browser with a fresh profile (nothing cached), opens the demo page
with ``?autostart=1`` and a fake microphone, and reads the page's own timings. The server
stays up across runs, as a deployed one would.

    python bench/first_frame.py --runs 5 [--threads N] [--config tiny] [--image PHOTO]

With ``--image`` each run opens the page, gives its "Own image" input the photo and presses
Start: the figure that matters is then Start -> first frame (the photo is sent, its face found,
its rig built and its first frame generated), beside page load -> first frame.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the project before tests/engine, a folder of the same name

from browser_helpers import chromium  # noqa: E402
from server_helpers import spawned_server  # noqa: E402

from server.config import default_engine_threads  # noqa: E402


async def one_run(url: str, folder: Path, image: str | None = None) -> dict:
    async with chromium(folder) as (_, page):
        if image:
            await page.goto(f"{url}/?mode=mirror")
            await page.wait_for_function("!document.getElementById('image-label').hidden", timeout=30_000)
            await page.set_input_files("#image", image)
            await page.click("#start")
        else:
            await page.goto(f"{url}/?autostart=1&mode=mirror")
        await page.wait_for_function("window.avatarDemo?.stats?.ttffMs !== undefined", timeout=30_000)
        stats = await page.evaluate("window.avatarDemo.stats")
        await page.click("#stop")
        await asyncio.sleep(1.0)
    return {"from_load_ms": round(stats["ttffFromLoadMs"]), "start_at_ms": stats.get("startedFromLoadMs"),
            "from_start_ms": round(stats["ttffMs"]), "marks": stats.get("marks", {})}


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=default_engine_threads(),
                   help="engine torch threads (default: as avatar serve)")
    p.add_argument("--config", default="tiny")
    p.add_argument("--image", default=None, metavar="PHOTO", help="start each session with this photograph")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    runs = []
    async with spawned_server(args.config, threads=args.threads, log_level="info") as srv:
        for i in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                run = await one_run(srv.url, Path(tmp), args.image)
            runs.append(run)
            print(f"run {i + 1}: page load -> first frame {run['from_load_ms']} ms, Start -> {run['from_start_ms']} ms "
                  f"(start {run['start_at_ms']} ms after load; steps after start {run['marks']})", flush=True)
        metrics = (await srv.http.get("/metrics")).text
    ttff = [r["from_load_ms"] for r in runs]
    server = [line for line in metrics.splitlines() if line.startswith("avatar_first_frame_seconds_")]
    from_start = [r["from_start_ms"] for r in runs]
    print(f"page load -> first decoded frame: median {statistics.median(ttff):.0f} ms, "
          f"min {min(ttff)}, max {max(ttff)} over {len(ttff)} cold browsers"
          + (f", photo {args.image}" if args.image else ""))
    print(f"Start -> first decoded frame: median {statistics.median(from_start):.0f} ms, "
          f"min {min(from_start)}, max {max(from_start)}")
    print("\n".join(server))
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "median_ms": statistics.median(ttff)}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
