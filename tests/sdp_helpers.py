"""SDP offers for the offer checks and their fuzzing: a real aiortc offer, browser-shaped ones, and
the systematic mutations of an offer (every line deleted, duplicated, given a NUL byte; fingerprint
algorithms and codecs swapped for unknown ones; attributes made huge)."""

from __future__ import annotations

from collections.abc import Iterator

from aiortc import RTCConfiguration, RTCPeerConnection

FINGERPRINT = ":".join(["3A"] * 32)


async def aiortc_offer(pc: RTCPeerConnection | None = None) -> str:
    """The offer an aiortc client makes (microphone and receive-only video), ICE gathered."""
    own = pc is None
    pc = pc or RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio", direction="sendrecv")
    pc.addTransceiver("video", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    if own:
        await pc.close()
    return sdp


def lines(*body: str) -> str:
    return "\r\n".join(body) + "\r\n"


CHROME_OFFER = lines(
    "v=0", "o=- 4611731400430051336 2 IN IP4 127.0.0.1", "s=-", "t=0 0", "a=group:BUNDLE 0 1",
    "a=extmap-allow-mixed", "a=msid-semantic: WMS 5f0c2f3a",
    "m=audio 9 UDP/TLS/RTP/SAVPF 111 63 9 0 8 13 110 126", "c=IN IP4 0.0.0.0", "a=rtcp:9 IN IP4 0.0.0.0",
    "a=candidate:3442447574 1 udp 2122260223 192.168.1.20 54400 typ host generation 0 network-id 1",
    "a=candidate:1a2b3c4d 1 udp 2113937151 6f1c3e2a-0b7d-4c55-9e0a-1b2c3d4e5f60.local 54401 typ host "
    "generation 0 network-cost 999",
    "a=candidate:842163049 1 udp 1686052607 203.0.113.5 54400 typ srflx raddr 192.168.1.20 rport 54400 "
    "generation 0", "a=ice-ufrag:Vn3Q", "a=ice-pwd:Zk3Kq9XyT0aBcDeFgHiJkLmN", "a=ice-options:trickle",
    f"a=fingerprint:sha-256 {FINGERPRINT}", "a=setup:actpass", "a=mid:0",
    "a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level",
    "a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid", "a=sendrecv", "a=msid:5f0c2f3a 0e4d8a61", "a=rtcp-mux",
    "a=rtcp-rsize", "a=rtpmap:111 opus/48000/2", "a=rtcp-fb:111 transport-cc",
    "a=fmtp:111 minptime=10;useinbandfec=1", "a=rtpmap:63 red/48000/2", "a=fmtp:63 111/111",
    "a=rtpmap:9 G722/8000", "a=rtpmap:0 PCMU/8000", "a=rtpmap:8 PCMA/8000", "a=rtpmap:13 CN/8000",
    "a=rtpmap:110 telephone-event/48000", "a=rtpmap:126 telephone-event/8000",
    "a=ssrc:2804562421 cname:Qm1aB2cD3eF4gH5i", "a=ssrc:2804562421 msid:5f0c2f3a 0e4d8a61",
    "m=video 9 UDP/TLS/RTP/SAVPF 96 97 45 98 99", "c=IN IP4 0.0.0.0", "a=rtcp:9 IN IP4 0.0.0.0",
    "a=ice-ufrag:Vn3Q", "a=ice-pwd:Zk3Kq9XyT0aBcDeFgHiJkLmN", "a=ice-options:trickle",
    f"a=fingerprint:sha-256 {FINGERPRINT}", "a=setup:actpass", "a=mid:1",
    "a=extmap:14 urn:ietf:params:rtp-hdrext:toffset", "a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid",
    "a=recvonly", "a=rtcp-mux", "a=rtcp-rsize", "a=rtpmap:96 VP8/90000", "a=rtcp-fb:96 goog-remb",
    "a=rtcp-fb:96 transport-cc", "a=rtcp-fb:96 ccm fir", "a=rtcp-fb:96 nack", "a=rtcp-fb:96 nack pli",
    "a=rtpmap:97 rtx/90000", "a=fmtp:97 apt=96", "a=rtpmap:45 AV1/90000",
    "a=fmtp:45 level-idx=5;profile=0;tier=0", "a=rtpmap:98 H264/90000",
    "a=fmtp:98 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
    "a=rtpmap:99 rtx/90000", "a=fmtp:99 apt=98",
)

FIREFOX_OFFER = lines(
    "v=0", "o=mozilla...THIS_IS_SDPARTA-99.0 6372382069318235612 0 IN IP4 0.0.0.0", "s=-", "t=0 0",
    f"a=fingerprint:sha-256 {FINGERPRINT}", "a=group:BUNDLE 0 1", "a=ice-options:trickle",
    "a=msid-semantic:WMS *", "m=audio 9 UDP/TLS/RTP/SAVPF 109 9 0 8 101", "c=IN IP4 0.0.0.0",
    "a=candidate:0 1 UDP 2122252543 192.168.1.20 55555 typ host",
    "a=candidate:1 1 TCP 2105524479 192.168.1.20 9 typ host tcptype active", "a=sendrecv",
    "a=end-of-candidates", "a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level",
    "a=extmap:2/recvonly urn:ietf:params:rtp-hdrext:csrc-audio-level",
    "a=extmap:3 urn:ietf:params:rtp-hdrext:sdes:mid", "a=fmtp:109 maxplaybackrate=48000;stereo=1;useinbandfec=1",
    "a=fmtp:101 0-15", "a=ice-pwd:5d3e6b1c9a7f42e8b0c1d2e3f4a5b6c7", "a=ice-ufrag:8f2a1c3d", "a=mid:0",
    "a=msid:{7b2d6c1e-1111-2222-3333-444455556666} {0a1b2c3d-5555-6666-7777-888899990000}", "a=rtcp-mux",
    "a=rtpmap:109 opus/48000/2", "a=rtpmap:9 G722/8000/1", "a=rtpmap:0 PCMU/8000", "a=rtpmap:8 PCMA/8000",
    "a=rtpmap:101 telephone-event/8000/1", "a=setup:actpass", "a=ssrc:3370301355 cname:{a1b2c3d4-e5f6}",
    "m=video 9 UDP/TLS/RTP/SAVPF 120 124 126 127", "c=IN IP4 0.0.0.0", "a=recvonly",
    "a=extmap:3 urn:ietf:params:rtp-hdrext:sdes:mid", "a=extmap:4 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time",
    "a=fmtp:126 profile-level-id=42e01f;level-asymmetry-allowed=1;packetization-mode=1",
    "a=fmtp:120 max-fs=12288;max-fr=60", "a=fmtp:124 apt=120", "a=fmtp:127 apt=126",
    "a=ice-pwd:5d3e6b1c9a7f42e8b0c1d2e3f4a5b6c7", "a=ice-ufrag:8f2a1c3d", "a=mid:1", "a=rtcp-fb:120 nack",
    "a=rtcp-fb:120 nack pli", "a=rtcp-fb:120 ccm fir", "a=rtcp-fb:120 goog-remb", "a=rtcp-fb:126 nack",
    "a=rtcp-mux", "a=rtcp-rsize", "a=rtpmap:120 VP8/90000", "a=rtpmap:124 rtx/90000",
    "a=rtpmap:126 H264/90000", "a=rtpmap:127 rtx/90000", "a=setup:actpass",
    "a=ssrc:2236126016 cname:{a1b2c3d4-e5f6}",
)


def mutations(sdp: str) -> Iterator[tuple[str, str]]:
    """(name, mutated SDP) for every line deleted, duplicated and split by a NUL byte, and the
    attacks on what aiortc trusts: unknown fingerprint algorithms and codecs, huge attributes."""
    body = sdp.splitlines()
    for i, line in enumerate(body):
        yield f"delete {line[:24]!r}", lines(*body[:i], *body[i + 1 :])
        yield f"duplicate {line[:24]!r}", lines(*body[: i + 1], *body[i:])
        yield f"NUL in {line[:24]!r}", lines(*body[:i], line[: len(line) // 2] + "\0" + line[len(line) // 2 :],
                                             *body[i + 1 :])
    yield "unknown fingerprint algorithm", "".join(
        line.replace("sha-", "sha3-") + "\r\n" for line in body)
    yield "unknown codecs", sdp.replace("opus/", "lyra/").replace("VP8/", "VP7/").replace("H264/", "H266/")
    yield "huge attribute", sdp.replace("a=rtcp-mux", "a=rtcp-mux\r\na=x-huge:" + "z" * 20_000, 1)
    yield "huge mid", sdp.replace("a=mid:0", "a=mid:" + "m" * 3000, 1)
