"""Trickle ICE over HTTP: the SDP fragments (RFC 8840, ``application/trickle-ice-sdpfrag``) that WHIP
and WHEP clients PATCH with the candidates they gather after sending their offer.

Browser WHIP/WHEP clients post the offer before gathering anything, so without these the server
would know none of the client's addresses. An ICE restart (new credentials) is not supported.

Every candidate costs connectivity checks, and aiortc's cost per added candidate grows with the
candidates it holds: a fragment carries at most as many as an offer's section
(:data:`~server.media.sdp.MAX_CANDIDATES`), each checked as an offer's are, and a resource takes a
bounded number of fragments and candidates over its life (:class:`TrickleBudget`).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field

from aiortc import RTCPeerConnection
from aiortc.sdp import candidate_from_sdp

from server.media.sdp import MAX_CANDIDATES, check_candidate

_UFRAG = re.compile(r"^a=ice-ufrag:(\S+)", re.MULTILINE)


class TrickleLimit(ValueError):
    """A fragment, or a resource's fragments together, past a bound; ``code`` says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Fragment:
    ufrag: str | None = None
    pwd: str | None = None
    candidates: list[tuple[str | None, str]] = field(default_factory=list)  # (mid, "candidate:" value)
    end: bool = False


def parse_fragment(text: str) -> Fragment:
    """The credentials, candidates (with the mid of their section) and end-of-candidates of a fragment."""
    frag = Fragment()
    mid: str | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("m="):
            mid = None
        elif line.startswith("a=mid:"):
            mid = line[len("a=mid:") :]
        elif line.startswith("a=ice-ufrag:"):
            frag.ufrag = line[len("a=ice-ufrag:") :]
        elif line.startswith("a=ice-pwd:"):
            frag.pwd = line[len("a=ice-pwd:") :]
        elif line.startswith("a=candidate:"):
            if len(frag.candidates) == MAX_CANDIDATES:
                raise TrickleLimit("too_many_candidates", f"a fragment carries at most {MAX_CANDIDATES} candidates")
            value = line[len("a=candidate:") :]
            check_candidate(value, number)
            frag.candidates.append((mid, value))
        elif line == "a=end-of-candidates":
            frag.end = True
        elif not line.startswith(("a=", "v=", "o=", "s=", "t=", "c=")):
            raise ValueError(f"not an SDP fragment line: {line[:60]!r}")
    return frag


@dataclass
class TrickleBudget:
    """What one WHIP/WHEP resource may still be sent: fragments and candidates over its life."""

    fragments: int
    candidates: int

    def spend(self, frag: Fragment) -> None:
        """Count a fragment against the budget, or raise :class:`TrickleLimit` (nothing is spent then)."""
        if self.fragments <= 0:
            raise TrickleLimit("too_many_fragments", "this resource has been sent all the fragments it takes")
        if len(frag.candidates) > self.candidates:
            raise TrickleLimit("too_many_candidates", f"this resource takes {self.candidates} more candidates, "
                               f"not {len(frag.candidates)}")
        self.fragments -= 1
        self.candidates -= len(frag.candidates)


_budgets: weakref.WeakKeyDictionary[RTCPeerConnection, TrickleBudget] = weakref.WeakKeyDictionary()


def budget(pc: RTCPeerConnection, fragments: int, candidates: int) -> TrickleBudget:
    """The budget of the resource behind ``pc`` (made with these bounds the first time it is asked)."""
    return _budgets.setdefault(pc, TrickleBudget(fragments, candidates))


def remote_ufrag(pc: RTCPeerConnection) -> str | None:
    """The ICE username fragment of the client's offer."""
    description = pc.remoteDescription
    match = _UFRAG.search(description.sdp) if description is not None else None
    return match.group(1) if match else None


def is_restart(pc: RTCPeerConnection, frag: Fragment) -> bool:
    """New credentials in a fragment ask for an ICE restart."""
    return frag.ufrag is not None and frag.ufrag != remote_ufrag(pc)


async def add_candidates(pc: RTCPeerConnection, frag: Fragment) -> int:
    """Hand the fragment's candidates (and its end-of-candidates) to the peer; how many were added."""
    first_mid = next((t.mid for t in pc.getTransceivers() if t.mid is not None), None)
    added = 0
    for mid, value in frag.candidates:
        candidate = candidate_from_sdp(value)
        candidate.sdpMid = mid if mid is not None else first_mid
        await pc.addIceCandidate(candidate)
        added += 1
    if frag.end:
        await pc.addIceCandidate(None)
    return added
