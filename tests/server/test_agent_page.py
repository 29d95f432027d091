"""The demo page's agent controls in a real Chromium: say-text box, interrupt button, event log,
listening/speaking state, and attaching as a viewer to a session an agent (the client library) drives."""

from __future__ import annotations

import pytest
from browser_helpers import chromium
from server_helpers import make_settings, running_server, wait_until

from server.client import AvatarSession

pytestmark = [
    pytest.mark.browser,
    pytest.mark.usefixtures("one_thread"),
]
LONG = ("This is a long answer that goes on and on, so that there is plenty of time to interrupt it "
        "before it ends. It has a second sentence too, and a third one after that.")


async def activity(page) -> str:
    return await page.evaluate("window.avatarDemo.activity")


async def test_agent_page_speaks_interrupts_and_shows_state(tmp_path):
    async with running_server(make_settings(max_sessions=2, vad=False), config="micro") as srv, \
            chromium(tmp_path) as (context, page):
        await page.goto(f"{srv.url}/?autostart=1&mode=agent")
        await page.wait_for_function("window.avatarDemo.activity === 'listening'", timeout=30_000)
        assert await page.get_attribute("#badge", "data-state") == "listening"

        await page.fill("#text", "Hello from the browser.")
        await page.click("#speak")
        await page.wait_for_function("window.avatarDemo.activity === 'speaking'", timeout=30_000)
        assert await page.text_content("#activity") == "speaking"
        await page.wait_for_function("window.avatarDemo.activity === 'listening'", timeout=30_000)

        await page.fill("#text", LONG)
        await page.click("#speak")
        await page.wait_for_function("window.avatarDemo.activity === 'speaking'", timeout=30_000)
        await page.click("#interrupt")
        await page.wait_for_function("window.avatarDemo.activity === 'listening'", timeout=2_000)
        log = await page.inner_text("#log")
        assert "interrupted" in log and "avatar speaking" in log and "avatar done" in log
        finished = await page.evaluate("window.avatarDemo.events.filter(e => e.type === 'playback.finished')")
        assert [e["interrupted"] for e in finished] == [False, True]
        await page.screenshot(path=str(tmp_path / "agent.png"))
        await page.click("#stop")
        assert await wait_until(lambda: not srv.manager.sessions, 10)

        # Attach: an agent made the session; the page is a viewer with a read-only event feed.
        async with await AvatarSession.create(srv.url, barge_in=False) as agent:
            viewer = await context.new_page()
            await viewer.goto(agent.viewer_url + "&autostart=1")
            await viewer.wait_for_function("window.avatarDemo.activity === 'listening'", timeout=30_000)
            assert await viewer.is_disabled("#speak") and await viewer.is_disabled("#mode")
            uid = await agent.say(LONG)
            await viewer.wait_for_function("window.avatarDemo.activity === 'speaking'", timeout=30_000)
            await agent.interrupt()
            await viewer.wait_for_function("window.avatarDemo.activity === 'listening'", timeout=5_000)
            assert uid in await viewer.inner_text("#log")
            await viewer.screenshot(path=str(tmp_path / "viewer.png"))
            await viewer.click("#stop")
            assert list(srv.manager.sessions) == [agent.id]  # leaving the page leaves the agent's session
        print(f"screenshots in {tmp_path}")
