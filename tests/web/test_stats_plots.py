"""The demo page's live plots (playout delay, deadline misses, fps, round-trip time over the last minute)
draw points from the ``metrics`` events and ``getStats()`` of a live session, in a real Chromium."""

from __future__ import annotations

import os
import shutil

import pytest
from browser_helpers import CHROMIUM, chromium
from server_helpers import make_settings, running_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not shutil.which("chromium") and not os.path.exists(CHROMIUM),
                       reason="Debian chromium is not installed (make test installs it)"),
]
PLOTS = ("delay", "misses", "fps", "rtt")
# Pixels of a plot's line: right of the scale label, inside the frame, opaque (the frame is translucent grey).
INKED = """(name) => {
  const canvas = document.querySelector(`figure[data-plot=${name}] canvas`);
  const { data } = canvas.getContext("2d").getImageData(60, 1, canvas.width - 61, canvas.height - 2);
  let inked = 0;
  for (let i = 0; i < data.length; i += 4) if (data[i + 3] > 200) inked += 1;
  return inked;
}"""


async def test_plots_draw_the_live_figures(tmp_path):
    async with running_server(make_settings(max_sessions=1), config="puppet") as srv, \
            chromium(tmp_path) as (_, page):
        await page.goto(f"{srv.url}/?autostart=1&mode=mirror")
        await page.wait_for_function(
            "['delay', 'misses', 'fps', 'rtt'].every(n => window.avatarDemo.plots[n].points.length >= 3)",
            timeout=30_000)
        for name in PLOTS:
            points = await page.evaluate(f"window.avatarDemo.plots.{name}.points")
            assert all(v >= 0 for _, v in points), (name, points)
            # The line spans the points' share of the minute: at least one opaque pixel per column of it.
            columns = (points[-1][0] - points[0][0]) / 60_000 * 240
            inked = await page.evaluate(INKED, name)
            assert inked >= max(4, 0.8 * columns), (name, inked, columns)
            caption = await page.text_content(f"figure[data-plot={name}] output")
            assert caption and caption != "–", (name, caption)
        delays = [v for _, v in await page.evaluate("window.avatarDemo.plots.delay.points")]
        server_delay = await page.evaluate("window.avatarDemo.stats.server.playout_delay_ms")
        assert delays[-1] == server_delay and 0 < server_delay < 2000
        fps = [v for _, v in await page.evaluate("window.avatarDemo.plots.fps.points")]
        assert 15 < fps[-1] < 35, fps
        await page.screenshot(path=str(tmp_path / "plots.png"))
        await page.click("#stop")


async def test_a_plot_keeps_only_the_last_minute(tmp_path):
    async with running_server(make_settings(), config="puppet") as srv, chromium(tmp_path) as (_, page):
        await page.goto(f"{srv.url}/")
        kept = await page.evaluate("""async () => {
          const { Plot } = await import("/static/plots.js");
          const plot = new Plot(document.createElement("canvas"), document.createElement("output"), { unit: " ms" });
          for (const t of [0, 30_000, 59_000, 61_000, 90_000]) plot.push(t / 1000, t);
          return [plot.points.map(([t]) => t), plot.caption.textContent];
        }""")
        assert kept == [[30_000, 59_000, 61_000, 90_000], "90 ms"]
