"""WHIP and WHEP with third-party clients: the npm package ``whip-whep`` (browser WHIP/WHEP client modules)
in a real Chromium, on a page served from another origin (so through CORS), publishing a fake
microphone of speech. The avatar (puppet engine) mouths the published speech for a WHEP viewer, and
the page's own WHEP viewer decodes video and voice."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, chromium
from server_helpers import loopback_only, make_settings, running_server, wait_until
from whip_helpers import MOUTH_FOLLOWS_VOICE_R, loopback_candidates_only, mouth_follows_voice, static_site, whep_viewer

PAGE = Path(__file__).resolve().parents[2] / "fixtures" / "whip_page"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not shutil.which("chromium") and not os.path.exists(CHROMIUM),
                       reason="Debian chromium is not installed (make test installs it)"),
    pytest.mark.skipif(not (PAGE / "node_modules" / "whip-whep").is_dir(),
                       reason=f"whip-whep is not installed: npm ci --prefix {PAGE} (make test does it)"),
]


async def test_whip_whep_clients_from_another_origin_drive_and_watch_the_avatar(monkeypatch, tmp_path):
    loopback_only(monkeypatch)
    loopback_candidates_only(monkeypatch)
    with static_site(PAGE) as site:
        settings = make_settings(cors_origins=[site])
        async with running_server(settings, config="puppet") as srv, chromium(tmp_path) as (_, page):
            assert site.rsplit(":", 1)[1] != srv.url.rsplit(":", 1)[1]  # two origins
            console: list[str] = []
            page.on("console", lambda msg: console.append(msg.text))
            await page.goto(f"{site}/index.html?api={srv.url}")
            await page.wait_for_function("window.whipTest?.whep?.resourceURL || window.whipTest?.error",
                                         timeout=30_000)
            assert await page.evaluate("window.whipTest.error") is None, console
            session = await page.evaluate("window.whipTest.session")
            live = srv.manager.sessions[session["session_id"]]
            assert live.peer.ingest_id is not None and len(live.outbound.viewers) == 1

            async with whep_viewer(srv, session) as viewer:
                t0 = time.monotonic()
                assert await wait_until(lambda: len(viewer.media.video) >= 175, 40), len(viewer.media.video)
                stats = await page.evaluate("whipStats()")
                # The page's microphone reached the session over WHIP ...
                assert stats["publisher"] == "connected" and stats["micPacketsSent"] > 100, stats
                mic = live.inbound.microphone
                assert mic.samples > 32_000 and mic.peak > 0.05, mic.peak
                # ... the page's own WHEP viewer decodes the avatar and hears its voice ...
                assert stats["viewer"] == "connected" and stats["framesDecoded"] >= 100, stats
                assert stats["audioSamples"] > 48_000 and stats["voice"]["loud"] > 25, stats
                # ... and the avatar's mouth follows the speech it voices.
                assert viewer.media.loud_packets(since=t0) > 25
                r, lag = mouth_follows_voice(viewer.media, live.avatar, since=t0 + 1.0)
                assert r > MOUTH_FOLLOWS_VOICE_R, (r, lag)

            await page.evaluate("whipStop()")  # DELETE on both resources
            assert await wait_until(lambda: session["session_id"] not in srv.manager.sessions, 10)
            print(f"whip-whep in Chromium: page viewer decoded {stats['framesDecoded']} frames, "
                  f"{stats['audioSamples']} audio samples; mouth vs voice r = {r:.2f} (lag {lag} frames)")
