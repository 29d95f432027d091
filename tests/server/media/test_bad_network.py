"""A mirror-mode client whose network turns bad mid-call (loss, jitter, reordering both ways) and
then recovers: late microphone audio queues behind the silence fed in its place (the buffer grows
by itself), nothing stalls, and once the network is steady the buffer is no longer than before."""

from __future__ import annotations

import asyncio
import time

import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from network_helpers import Conditions, ImpairedPath
from server_helpers import (
    Received,
    SpeechTrack,
    admitted_session,
    collect,
    loopback_only,
    running_server,
    speech_pcm16,
    wait_until,
)

from server.media.peer import JITTER_ATTR

BAD = Conditions(loss=0.05, delay_s=0.02, jitter_s=0.08)  # 20-100 ms one way: packets 20 ms apart overtake
CLEAN_S, BAD_S, RECOVER_S = 3.0, 6.0, 12.0
# A loaded machine's own late packet restarts the microphone buffer's steady spell: its trim may
# take this much longer.
RECOVER_MORE_S = 8.0


async def test_a_bad_network_grows_the_microphone_buffer_stalls_nothing_and_recovers(monkeypatch):
    loopback_only(monkeypatch)
    path = ImpairedPath(seed=1)
    await path.start()
    async with running_server() as srv:
        session = await admitted_session(srv, {"mode": "mirror"})
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTrack(SpeechTrack(speech_pcm16(), loop=True))
        pc.addTransceiver("video", direction="recvonly")
        await pc.setLocalDescription(await pc.createOffer())
        res = await srv.http.post(f"/v1/sessions/{session['session_id']}/offer",
                                  json={"sdp": path.offer_to_server(pc.localDescription.sdp), "type": "offer"},
                                  headers={"Authorization": f"Bearer {session['token']}"})
        assert res.status_code == 200, res.text
        answer = res.json()
        video, done = Received("video"), asyncio.Event()
        pc.on("track", lambda t: asyncio.ensure_future(collect(t, video, done)) if t.kind == "video" else None)
        await pc.setRemoteDescription(RTCSessionDescription(path.answer_to_client(answer["sdp"]), answer["type"]))
        live = srv.manager.sessions[session["session_id"]]
        assert await wait_until(lambda: len(video.arrival) > 25, 30.0), "the call is up through the relay"
        feeder = live.inbound.feeder

        async def phase(seconds: float) -> list[float]:
            """Audio left waiting for the feed clock (seconds), sampled every 100 ms."""
            waiting = []
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                await asyncio.sleep(0.1)
                waiting.append(len(feeder.mic) / feeder.sample_rate)
            return waiting

        clean = await phase(CLEAN_S)
        underruns, clean_misses = feeder.jitter.underruns, live.outbound.playout.stats().deadline_misses
        bad_from = time.monotonic()
        path.set(BAD)
        await phase(BAD_S)
        path.set(Conditions())
        good_from = time.monotonic()
        recovered = await phase(RECOVER_S)
        more_until = time.monotonic() + RECOVER_MORE_S
        while np.median(recovered[-20:]) > np.median(clean) + 0.03 and time.monotonic() < more_until:
            recovered += await phase(1.0)
        done.set()
        stats = live.outbound.playout.stats()
        (receiver,) = [t.receiver for t in live.pc.getTransceivers() if t.kind == "audio"]
        mic_buffer = getattr(receiver, JITTER_ATTR)
        await pc.close()
    path.close()

    assert path.dropped["up"] > 10 and path.dropped["down"] > 10, "the network lost datagrams both ways"
    assert feeder.jitter.underruns > underruns, "late microphone packets left due audio missing"
    assert np.median(recovered[-20:]) <= np.median(clean) + 0.03, "the microphone buffer back to its size, once steady"
    # Lost microphone packets were given up, and nothing waits behind them: aiortc's own receive
    # buffer would hold 14 packets (280 ms) from the first loss on.
    assert mic_buffer.skipped > 5 and mic_buffer.held <= live.settings.feed.mic_jitter_packets, vars(mic_buffer)

    arrivals = np.asarray(video.arrival)
    during = arrivals[(arrivals > bad_from) & (arrivals < good_from)]
    assert during.size > 0.6 * 25 * BAD_S, f"video kept coming through the bad spell ({during.size} frames)"
    assert np.diff(during).max() < 1.0, "no stall of a second or more"
    after = arrivals[arrivals > good_from + 2.0]
    assert after.size > 0.8 * 25 * (RECOVER_S - 2.0), "full rate once recovered"
    misses = stats.deadline_misses - clean_misses
    # The network does not starve the server's own playout. A loaded machine's late chunk costs a
    # resync, about 40 frames of hold counted as misses (two of them seen on a loaded CI box: 23%);
    # starved playout would miss most frames.
    assert misses / max(1, stats.frames_shown) < 0.35, (misses, stats)
