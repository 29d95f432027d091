"""SDP offers checked before aiortc sees them.

aiortc's parser trusts its input: an ``a=fmtp`` whose ``a=rtpmap`` is missing raises
StopIteration, a BUNDLE group naming a missing mid leaves a transceiver without a transport (its
connect task and ``close()`` then raise AttributeError), an out-of-range SSRC or port fails later
in a background task. :func:`check_offer` refuses all of that up front, with a message that names
the line, so a bad offer is a ``400 bad_sdp`` and never a 500 or a broken peer. It checks the
grammar of every attribute aiortc reads, and the structure aiortc relies on; what it lets through
is what a browser, OBS or GStreamer sends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from aiortc.codecs import CODECS
from aiortc.rtp import FORBIDDEN_PAYLOAD_TYPES
from aiortc.sdp import FMTP_INT_PARAMETERS

MAX_LINE_BYTES = 4096
MAX_SECTIONS = 4  # a browser sends 2 (microphone, receive-only video)
MAX_CANDIDATES = 32  # per section; each one costs connectivity checks
KINDS = ("audio", "video")
DIRECTIONS = ("sendrecv", "sendonly", "recvonly", "inactive")
FINGERPRINT_BYTES = {"sha-256": 32, "sha-384": 48, "sha-512": 64}  # what aiortc's DTLS can verify
U32 = 2**32

_LINE = re.compile(r"[a-z]=[\x20-\x7e\t]*")
_MEDIA = re.compile(r"m=(\S+) (\d{1,5}) ([A-Z/]+) (.+)")  # aiortc's own shape of it
_FORMATS = re.compile(r"\d{1,3}(?: \d{1,3})*")
_CONNECTION = re.compile(r"IN IP[46] \S+")
_TOKEN = r"[A-Za-z0-9!#$%&'*+\-.^_`{|}~]"
# Attributes aiortc parses, and the grammar its parser needs (full match of the value).
_GRAMMAR: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern)
    for name, pattern in {
        "rtpmap": r"(\d{1,3}) ([A-Za-z0-9_.\-]{1,32})/(\d{1,6})(?:/(\d{1,2}))?",
        "fmtp": r"(\d{1,3}) (\S+)",
        "rtcp-fb": r"(\*|\d{1,3}) (\S+)(?: \S+)?",
        "extmap": r"(\d{1,3})(?:/(?:sendrecv|sendonly|recvonly|inactive))? (\S+)",
        "ssrc": r"(\d{1,10}) [^\s:]+:.*",
        "ssrc-group": r"\S+((?: \d{1,10})*)",
        "candidate": r"\S{1,32} (\d{1,3}) (?i:udp|tcp) (\d{1,10}) \S+ (\d{1,5}) typ (?:host|srflx|prflx|relay)"
                     r"((?: \S+ \S+)*)",
        "fingerprint": r"(\S+) ((?:[0-9A-Fa-f]{2}:)*[0-9A-Fa-f]{2})",
        "setup": r"actpass|active|passive",
        "ice-ufrag": r"[A-Za-z0-9+/]{4,256}",
        "ice-pwd": r"[A-Za-z0-9+/]{22,256}",
        "mid": _TOKEN + r"{1,32}",
        "msid": r"\S+(?: \S+)?",
        "rtcp": r"(\d{1,5})(?: IN IP[46] \S+)?",
        "group": r"\S+(?: \S+)*",
        "msid-semantic": r"\s*\S+(?: \S+)*",
        "max-message-size": r"\d{1,10}",
        "sctp-port": r"\d{1,5}",
        "sctpmap": r"\d{1,5} \S+.*",
    }.items()
}


class BadOffer(ValueError):
    """The client's SDP offer cannot be used (malformed, or lacks audio/video sections)."""


@dataclass
class _Section:
    """What the checks need from one m-section, or from the session level."""

    kind: str  # "" for the session level
    line: int
    formats: set[int] = field(default_factory=set)
    attrs: dict[str, list[str]] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)

    def first(self, name: str) -> str | None:
        values = self.attrs.get(name)
        return values[0] if values else None


def check_offer(sdp: str) -> None:
    """Raise :class:`BadOffer` unless ``sdp`` is an offer aiortc can apply and connect safely."""
    if not sdp.strip():
        raise BadOffer("empty SDP")
    session, sections = _split(sdp)
    if not sections:
        raise BadOffer("the offer has no media sections")
    if len(sections) > MAX_SECTIONS:
        raise BadOffer(f"the offer has {len(sections)} media sections; at most {MAX_SECTIONS}")
    mids = []
    for section in sections:
        mids.append(_check_section(section, session))
    if len(set(mids)) != len(mids):
        raise BadOffer("two media sections share one a=mid")
    for group in session.attrs.get("group", []):
        semantic, *items = group.split()
        if semantic == "BUNDLE" and not set(items) <= set(mids):
            raise BadOffer(f"a=group:BUNDLE names a mid no media section has ({' '.join(items)})")


def _split(sdp: str) -> tuple[_Section, list[_Section]]:
    lines = sdp.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    session = _Section("", 1)
    sections: list[_Section] = []
    current = session
    for number, raw in enumerate(lines, start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        if number == 1 and line != "v=0":
            raise BadOffer("an SDP offer starts with v=0")
        if len(line) > MAX_LINE_BYTES:
            raise BadOffer(f"line {number} is over {MAX_LINE_BYTES} bytes")
        if not _LINE.fullmatch(line):
            raise BadOffer(f"line {number} is not a printable ASCII 'x=value' line")
        if line.startswith("m="):
            current = _media(line, number)
            sections.append(current)
        elif line.startswith("c=") and not _CONNECTION.fullmatch(line[2:]):
            raise BadOffer(f"line {number}: bad connection line {line[:80]!r}")
        elif line.startswith("a="):
            _attribute(current, line[2:], number)
    return session, sections


def _media(line: str, number: int) -> _Section:
    m = _MEDIA.fullmatch(line)
    if m is None:
        raise BadOffer(f"line {number}: bad media line {line[:80]!r}")
    if m.group(1) not in KINDS:
        raise BadOffer(f"line {number}: only audio and video media sections are supported, not {m.group(1)!r}")
    if not _FORMATS.fullmatch(m.group(4)):
        raise BadOffer(f"line {number}: bad payload type list {m.group(4)[:40]!r}")
    if int(m.group(2)) > 65535:
        raise BadOffer(f"line {number}: port {m.group(2)} out of range")
    formats = [int(pt) for pt in m.group(4).split()]
    for pt in formats:
        if pt > 127 or pt in FORBIDDEN_PAYLOAD_TYPES:
            raise BadOffer(f"line {number}: payload type {pt} is not a valid RTP payload type")
    return _Section(m.group(1), number, set(formats))


def _attribute(section: _Section, text: str, number: int) -> None:
    name, colon, value = text.partition(":")
    if not colon:
        if name in _GRAMMAR:
            raise BadOffer(f"line {number}: a={name} needs a value")
        section.flags.add(name)
        return
    grammar = _GRAMMAR.get(name)
    if grammar is not None:
        m = grammar.fullmatch(value)
        if m is None:
            raise BadOffer(f"line {number}: malformed a={name} value {value[:80]!r}")
        _check_ranges(name, m, number)
    section.attrs.setdefault(name, []).append(value)


def _in_range(value: str | None, low: int, high: int, what: str, number: int) -> None:
    if value is not None and not low <= int(value) < high:
        raise BadOffer(f"line {number}: {what} {value} out of range")


def _check_ranges(name: str, m: re.Match[str], number: int) -> None:
    """The numbers an attribute carries, within what RTP, ICE and aiortc's packers take."""
    match name:
        case "rtpmap":
            _in_range(m.group(1), 0, 128, "payload type", number)
            _in_range(m.group(3), 1, 10**6, "clock rate", number)
            _in_range(m.group(4), 1, 9, "channel count", number)
        case "fmtp":
            _in_range(m.group(1), 0, 128, "payload type", number)
            for param in m.group(2).split(";"):
                key, eq, value = param.partition("=")
                if eq and key in FMTP_INT_PARAMETERS and not (value.isdigit() and len(value) <= 10):
                    raise BadOffer(f"line {number}: a=fmtp {key} must be an integer, not {value[:20]!r}")
        case "rtcp-fb":
            _in_range(None if m.group(1) == "*" else m.group(1), 0, 128, "payload type", number)
        case "extmap":
            _in_range(m.group(1), 1, 256, "header extension id", number)
        case "ssrc":
            _in_range(m.group(1), 0, U32, "SSRC", number)
        case "ssrc-group":
            for ssrc in m.group(1).split():
                _in_range(ssrc, 0, U32, "SSRC", number)
        case "candidate":
            _in_range(m.group(1), 1, 257, "candidate component", number)
            _in_range(m.group(2), 0, U32, "candidate priority", number)
            _in_range(m.group(3), 1, 65536, "candidate port", number)
            extras = m.group(4).split()
            for key, value in zip(extras[::2], extras[1::2], strict=True):
                if key == "rport" and not (value.isdigit() and int(value) < 65536):
                    raise BadOffer(f"line {number}: candidate rport {value[:20]!r} is not a port")
        case "fingerprint":
            size = FINGERPRINT_BYTES.get(m.group(1).lower())
            if size is not None and len(m.group(2)) != 3 * size - 1:
                raise BadOffer(f"line {number}: a {m.group(1)} fingerprint has {size} bytes")
        case "rtcp":
            _in_range(m.group(1), 0, 65536, "RTCP port", number)


def check_candidate(value: str, number: int) -> None:
    """One ``a=candidate`` value (after the colon), as an offer's are checked: :class:`BadOffer` if
    aiortc could not use it (a port of 0 or over 65535 among them)."""
    _attribute(_Section("", number), "candidate:" + value, number)


def _check_section(section: _Section, session: _Section) -> str:
    """One m-section against what aiortc needs of it; returns its mid."""
    where = f"the {section.kind} section (line {section.line})"

    def inherited(name: str) -> list[str]:
        return section.attrs.get(name) or session.attrs.get(name) or []

    mid = section.first("mid")
    if mid is None:
        raise BadOffer(f"{where} has no a=mid")
    if not section.flags & set(DIRECTIONS):
        raise BadOffer(f"{where} has no direction (a=sendrecv, a=sendonly, a=recvonly or a=inactive)")
    if "rtcp-mux" not in section.flags:
        raise BadOffer(f"{where} lacks a=rtcp-mux, which this server requires")
    if not inherited("ice-ufrag") or not inherited("ice-pwd"):
        raise BadOffer(f"{where} has no ICE credentials (a=ice-ufrag, a=ice-pwd)")
    if not inherited("setup"):
        raise BadOffer(f"{where} has no DTLS role (a=setup)")
    algorithms = {f.split()[0].lower() for f in inherited("fingerprint")}
    if not algorithms & set(FINGERPRINT_BYTES):
        raise BadOffer(f"{where} has no DTLS fingerprint this server can verify ({', '.join(FINGERPRINT_BYTES)})")
    if len(section.attrs.get("candidate", [])) > MAX_CANDIDATES:
        raise BadOffer(f"{where} has over {MAX_CANDIDATES} ICE candidates")
    _check_codecs(section, where)
    return mid


def _check_codecs(section: _Section, where: str) -> None:
    mapped: dict[int, str] = {}
    for value in section.attrs.get("rtpmap", []):
        pt, codec = value.split(" ", 1)
        if int(pt) in mapped:
            raise BadOffer(f"{where} maps payload type {pt} twice")
        if int(pt) not in section.formats:
            raise BadOffer(f"{where} maps payload type {pt}, which its m= line does not list")
        mapped[int(pt)] = codec.split("/")[0].lower()
    for name in ("fmtp", "rtcp-fb"):
        for value in section.attrs.get(name, []):
            pt = value.split(" ", 1)[0]
            if pt != "*" and int(pt) not in mapped:
                raise BadOffer(f"{where} has a={name}:{pt} without an a=rtpmap:{pt}")
    usable = {c.mimeType.split("/")[1] for c in CODECS[section.kind]} - {"rtx"}  # rtx carries another codec
    if not {name.lower() for name in usable} & set(mapped.values()):
        raise BadOffer(f"{where} offers no codec this server can use ({', '.join(sorted(usable))})")
