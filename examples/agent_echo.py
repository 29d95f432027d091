"""A tiny rule-based agent in front of the avatar: it answers what you type, spoken by the avatar.

    make run                                  # the server, in one terminal
    .venv/bin/python examples/agent_echo.py   # this agent, in another: open the printed URL, then type

The agent holds the session's control socket; the page at the printed URL is a viewer (video,
voice, event log). Speak into the page's microphone while the avatar talks and it stops
(barge-in); the agent prints what it hears about. ``--say "hi" --say "bye"`` runs
non-interactively and ``--headless`` connects an in-process viewer instead of a browser.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import re
import sys
from collections.abc import Iterable

from server.base.protocol import PlaybackFinished, PlaybackStarted, UserSpeechStarted, UserSpeechStopped
from server.client import AvatarSession

RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(hi|hello|hey|good (morning|afternoon|evening))\b", re.I), "Hello! Nice to meet you."),
    (re.compile(r"\b(your name|who are you)\b", re.I), "I am a talking avatar, rendered live, frame by frame."),
    (re.compile(r"\bhow are you\b", re.I), "I am doing well, thank you. How are you?"),
    (re.compile(r"\bthank", re.I), "You are welcome."),
    (re.compile(r"\b(bye|goodbye|see you)\b", re.I), "Goodbye! It was nice talking to you."),
    (re.compile(r"\bhelp\b", re.I), "Ask me the time, my name, or just say something and I will repeat it."),
]


def respond(text: str, now: dt.datetime | None = None) -> str:
    """The agent's whole brain: a few rules, the time, and otherwise an echo."""
    text = " ".join(text.split())
    if not text:
        return "Did you want to say something?"
    if re.search(r"\bwhat time\b|\bthe time\b", text, re.I):
        now = now or dt.datetime.now()
        return f"It is {now.hour % 12 or 12}:{now.minute:02d} {'in the morning' if now.hour < 12 else 'now'}."
    for pattern, answer in RULES:
        if pattern.search(text):
            return answer
    if text.endswith("?"):
        return f"Good question. You asked: {text}"
    return f"You said: {text}"


async def _print_events(avatar: AvatarSession) -> None:
    async for event in avatar.events():
        match event:
            case PlaybackStarted():
                print(f"  [avatar speaking {event.utterance_id} at {event.pts:.2f} s]")
            case PlaybackFinished():
                note = " (interrupted)" if event.interrupted else ""
                print(f"  [avatar done {event.utterance_id}{note}]")
            case UserSpeechStarted():
                print(f"  [you are speaking at {event.mic_time:.2f} s{': interrupting' if event.interrupting else ''}]")
            case UserSpeechStopped():
                print(f"  [you spoke {event.duration_s:.1f} s]")
            case _ if event.type == "error":
                print(f"  [error {event.code}: {event.message}]")


async def _drain(track) -> None:
    """Read a received track to the end (an unread track buffers without limit)."""
    from aiortc.mediastreams import MediaStreamError

    while True:
        try:
            await track.recv()
        except MediaStreamError:
            return


async def _stdin_lines() -> asyncio.Queue[str | None]:
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(queue.put_nowait, line)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    loop.run_in_executor(None, read)
    return queue


async def run(url: str, lines: Iterable[str] | None, headless: bool, server_token: str | None) -> list[str]:
    """Run the agent; with ``lines`` it answers each in turn (waiting for each answer to play) and returns."""
    said: list[str] = []
    async with await AvatarSession.create(url, server_token=server_token, barge_in=True) as avatar:
        tasks = [asyncio.create_task(_print_events(avatar))]
        if headless:
            pc = await avatar.connect_media()
            tasks += [asyncio.create_task(_drain(r.track)) for r in pc.getReceivers() if r.track is not None]
        else:
            print(f"Open {avatar.viewer_url} to see the avatar, then type here (Ctrl-D to quit).")
        try:
            if lines is not None:
                for line in lines:
                    answer = respond(line)
                    print(f"> {line}\n{answer}")
                    finished = await avatar.say_and_wait(answer)
                    said.append(finished.utterance_id)
                return said
            queue = await _stdin_lines()
            while (line := await queue.get()) is not None:
                if line.strip().lower() in ("quit", "exit"):
                    break
                answer = respond(line)
                print(answer)
                await avatar.interrupt()  # a new question cuts the previous answer short
                said.append(await avatar.say(answer))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="the avatar server")
    parser.add_argument("--server-token", help="the server's bearer token, if it has one")
    parser.add_argument("--say", action="append", help="answer this line and exit (repeatable)")
    parser.add_argument("--headless", action="store_true", help="connect an in-process viewer, not a browser")
    args = parser.parse_args(argv)
    asyncio.run(run(args.url, args.say, args.headless, args.server_token))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
