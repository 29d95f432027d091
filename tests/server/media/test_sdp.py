"""Offer checks before aiortc: real offers pass, each way an offer breaks aiortc is refused by
name, and every systematic mutation of a real offer gives an answer or BadOffer — never another
exception, never a peer that cannot close, never a failing background task."""

from __future__ import annotations

import asyncio
import collections

import pytest
from aiortc import RTCSessionDescription
from aiortc.mediastreams import AudioStreamTrack, VideoStreamTrack
from fuzz_budget import fuzz
from hypothesis import given
from hypothesis import strategies as st
from sdp_helpers import CHROME_OFFER, FINGERPRINT, FIREFOX_OFFER, aiortc_offer, lines, mutations
from server_helpers import loopback_only

from server.media.peer import BadOffer, answer, close_peer, create_peer
from server.media.sdp import check_offer


@pytest.fixture(autouse=True)
def _loopback(monkeypatch):
    loopback_only(monkeypatch)


@pytest.fixture
async def loop_errors():
    """Exceptions the event loop saw and nobody retrieved (a crashed background task)."""
    errors: list[dict] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield errors
    loop.set_exception_handler(previous)


async def test_real_and_browser_shaped_offers_pass():
    for sdp in (await aiortc_offer(), CHROME_OFFER, FIREFOX_OFFER):
        check_offer(sdp)


async def test_browser_shaped_offers_are_answered():
    for sdp in (CHROME_OFFER, FIREFOX_OFFER):
        pc = create_peer([])
        try:
            reply = await answer(pc, RTCSessionDescription(sdp=sdp, type="offer"), VideoStreamTrack(),
                                 AudioStreamTrack())
            assert "a=rtpmap:111 opus/48000/2" in reply.sdp or "a=rtpmap:109 opus/48000/2" in reply.sdp
            assert "VP8/90000" in reply.sdp
        finally:
            await close_peer(pc)


def refusal(sdp: str) -> str:
    with pytest.raises(BadOffer) as refused:
        check_offer(sdp)
    return str(refused.value)


def edit(old: str, new: str, sdp: str = CHROME_OFFER) -> str:
    assert old in sdp
    return sdp.replace(old, new)


@pytest.mark.parametrize(
    ("sdp", "message"),
    [
        (edit("a=rtpmap:97 rtx/90000\r\n", ""), "a=fmtp:97 without an a=rtpmap:97"),  # StopIteration in aiortc
        (edit("a=rtpmap:96 VP8/90000\r\n", ""), "a=rtcp-fb:96 without an a=rtpmap:96"),
        (edit("a=mid:0", "a=mid:\0"), "line 19 is not a printable ASCII"),
        (edit("a=mid:0", "a=mid:0\u2028"), "not a printable ASCII"),  # aiortc would split the line there
        (edit("a=mid:1", "a=mid:2"), "BUNDLE names a mid"),  # a transceiver without a transport
        (edit("a=mid:1", "a=mid:0"), "share one a=mid"),
        (edit("a=mid:1\r\n", ""), "has no a=mid"),
        (edit("a=recvonly\r\n", ""), "has no direction"),
        (edit("a=setup:actpass\r\n", ""), "has no DTLS role"),
        (CHROME_OFFER.replace("a=ice-pwd:Zk3Kq9XyT0aBcDeFgHiJkLmN\r\n", ""), "no ICE credentials"),
        (CHROME_OFFER.replace("sha-256", "md5"), "no DTLS fingerprint this server can verify"),
        (CHROME_OFFER.replace("sha-256 " + FINGERPRINT, "sha-256 3A:3A"), "fingerprint has 32 bytes"),
        (CHROME_OFFER.replace("a=rtcp-mux\r\n", ""), "lacks a=rtcp-mux"),
        (edit("VP8/90000", "VP9/90000").replace("H264/90000", "H266/90000"), "offers no codec this server can use"),
        (edit("a=ssrc:2804562421 cname", "a=ssrc:99999999999 cname"), "malformed a=ssrc"),
        (edit("a=ssrc:2804562421 cname", "a=ssrc:4294967296 cname"), "SSRC 4294967296 out of range"),
        (edit("a=extmap:14 ", "a=extmap:0 "), "header extension id 0 out of range"),
        (edit("54400 typ host", "70000 typ host"), "candidate port 70000 out of range"),
        (edit("rport 54400", "rport x"), "candidate rport"),
        (edit("a=fmtp:97 apt=96", "a=fmtp:97 apt=x"), "apt must be an integer"),
        (edit("96 97 45 98 99", "96 97 45 98 99 200"), "payload type 200"),
        (edit("a=rtpmap:45 AV1", "a=rtpmap:46 AV1"), "which its m= line does not list"),
        (edit("a=rtpmap:97 rtx/90000", "a=rtpmap:96 rtx/90000"), "maps payload type 96 twice"),
        (edit("a=mid:0", "a=mid:0\r\na=x:" + "y" * 5000), "over 4096 bytes"),
        (CHROME_OFFER + lines("m=application 9 UDP/DTLS/SCTP webrtc-datachannel"), "only audio and video"),
        (edit("m=video 9 ", "m=video nine "), "bad media line"),
        (edit("96 97 45 98 99", "96 97 x"), "bad payload type list"),
        ("v=1\r\n" + CHROME_OFFER[5:], "starts with v=0"),
        ("hello", "starts with v=0"),
        ("", "empty SDP"),
        (lines("v=0", "o=- 1 1 IN IP4 0.0.0.0", "s=-", "t=0 0"), "no media sections"),
    ],
)
def test_what_breaks_aiortc_is_refused_by_name(sdp, message):
    assert message in refusal(sdp)


def test_too_many_sections_or_candidates_are_refused():
    audio = CHROME_OFFER[CHROME_OFFER.index("m=audio") : CHROME_OFFER.index("m=video")]
    many = CHROME_OFFER + "".join(audio.replace("a=mid:0", f"a=mid:{i}") for i in range(2, 5))
    assert "at most 4" in refusal(many)
    candidate = "a=candidate:1 1 udp 2122260223 192.168.1.20 54400 typ host\r\n"
    assert "over 32 ICE candidates" in refusal(edit("a=ice-ufrag:Vn3Q\r\n", candidate * 33 + "a=ice-ufrag:Vn3Q\r\n"))


async def answer_or_refuse(sdp: str) -> str:
    """'answered' or 'refused', after closing the peer; anything else raises."""
    pc = create_peer([])
    try:
        await answer(pc, RTCSessionDescription(sdp=sdp, type="offer"), VideoStreamTrack(), AudioStreamTrack())
        return "answered"
    except BadOffer as exc:
        assert str(exc)
        return "refused"
    finally:
        await pc.close()  # plain aiortc close: it raises if the offer left a transceiver without transport


async def test_every_systematic_mutation_of_a_real_offer_is_answered_or_refused(loop_errors):
    outcomes: collections.Counter[str] = collections.Counter()
    for name, sdp in mutations(await aiortc_offer()):
        outcome = await answer_or_refuse(sdp)
        outcomes[outcome] += 1
        if name.startswith(("NUL", "unknown", "huge mid")):
            assert outcome == "refused", name
    await asyncio.sleep(0.2)
    assert not loop_errors
    assert outcomes["answered"] >= 60 and outcomes["refused"] >= 60, outcomes  # both kinds are exercised


@st.composite
def mangled(draw: st.DrawFn, base: str) -> str:
    body = base.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(body) - 1))
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "chars", "replace value"]))
        if op == "delete":
            del body[i]
        elif op == "duplicate":
            body.insert(i, body[i])
        elif op == "swap":
            j = draw(st.integers(0, len(body) - 1))
            body[i], body[j] = body[j], body[i]
        elif op == "chars":
            pos = draw(st.integers(0, len(body[i])))
            body[i] = body[i][:pos] + draw(st.text(max_size=6)) + body[i][pos:]
        else:
            key = body[i].split(":", 1)[0]
            body[i] = key + ":" + draw(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40))
        if not body:
            break
    return lines(*body)


async def test_random_mutations_are_answered_or_refused(loop_errors):
    base = await aiortc_offer()
    seen: collections.Counter[str] = collections.Counter()
    loop = asyncio.get_running_loop()

    @fuzz(60)
    @given(mangled(base))
    def run(sdp: str) -> None:
        seen[asyncio.run_coroutine_threadsafe(answer_or_refuse(sdp), loop).result(10)] += 1

    await asyncio.to_thread(run)
    await asyncio.sleep(0.2)
    assert not loop_errors
    assert seen["answered"] and seen["refused"], seen
