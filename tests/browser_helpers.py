"""A cold Chromium (Debian package, driven by Playwright) with a fake microphone, for the page tests
and ``bench/first_frame.py``."""

from __future__ import annotations

import contextlib
import shutil
import wave
from collections.abc import AsyncIterator
from pathlib import Path

from server_helpers import speech_pcm16

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream", "--allow-loopback-in-peer-connection",
    "--disable-features=WebRtcHideLocalIpsWithMdns",
]


def write_wav(path: Path, rate: int = 48_000) -> None:
    pcm = speech_pcm16(rate)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


@contextlib.asynccontextmanager
async def chromium(folder: Path, deny_microphone: bool = False,
                   camera: Path | None = None) -> AsyncIterator[tuple[object, object]]:
    """``(context, page)`` of a new browser with a fresh profile in ``folder``; its fake microphone
    plays speech, or the permission prompt is refused with ``deny_microphone``; its fake camera
    shows the ``camera`` Y4M file (looped), else Chromium's test pattern."""
    from playwright.async_api import async_playwright

    if deny_microphone:
        args = [f for f in FLAGS if f != "--use-fake-ui-for-media-stream"] + ["--deny-permission-prompts"]
    else:
        wav = folder / "mic.wav"
        write_wav(wav)
        args = [*FLAGS, f"--use-file-for-fake-audio-capture={wav}"]
        if camera is not None:
            args.append(f"--use-file-for-fake-video-capture={camera}")
    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(folder / "profile"), executable_path=CHROMIUM, headless=True, args=args)
        try:
            yield context, context.pages[0] if context.pages else await context.new_page()
        finally:
            await context.close()
