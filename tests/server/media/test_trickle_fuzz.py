"""Property-based fuzzing of the trickle ICE fragment parser: whatever text a WHIP/WHEP client
PATCHes, the parser returns a fragment within the bounds whose every candidate aiortc can parse
and use, or raises ``ValueError`` (a ``400``/``413`` through the API); never anything else."""

from __future__ import annotations

from aiortc.sdp import candidate_from_sdp
from fuzz_budget import fuzz
from hypothesis import given
from hypothesis import strategies as st

from server.media.sdp import MAX_CANDIDATES
from server.media.trickle import Fragment, TrickleBudget, parse_fragment

ports = st.one_of(st.integers(1, 65535), st.sampled_from([-5, 0, 65536, 70000]), st.just("x"))
numbers = st.one_of(st.integers(-10, 70_000), st.sampled_from([0, 1, 65535, 65536, 2**32, 2**32 - 1]),
                    st.text("0123456789-+x", min_size=0, max_size=12))
tokens = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=0, max_size=12)


@st.composite
def candidate_lines(draw) -> str:
    """Mostly well-formed candidates with a field or two out of range, sometimes any words at all."""
    fields = [draw(st.from_regex(r"[a-z0-9+/]{1,8}", fullmatch=True)), draw(st.integers(1, 2)),
              draw(st.sampled_from(["udp", "UDP", "tcp"])), draw(st.integers(0, 2**32 - 1)),
              draw(st.sampled_from(["127.0.0.1", "::1"])), draw(ports), "typ",
              draw(st.sampled_from(["host", "srflx", "prflx", "relay"]))]
    extras = draw(st.lists(st.tuples(st.sampled_from(["raddr", "rport", "generation", "tcptype", "ufrag"]),
                                     st.one_of(tokens, ports.map(str))), max_size=2))
    words = [str(f) for f in fields] + [str(w) for pair in extras for w in pair]
    if draw(st.integers(0, 9)) == 0:  # broken: a field replaced, or the words shuffled
        at = draw(st.integers(0, len(words) - 1))
        words[at] = draw(st.one_of(tokens, numbers.map(str)))
        words = draw(st.permutations(words)) if draw(st.booleans()) else words
    return "a=candidate:" + " ".join(words)


known = st.sampled_from(["a=end-of-candidates", "a=mid:0", "a=mid:1", "m=audio 9 UDP/TLS/RTP/SAVPF 0",
                         "a=ice-ufrag:abcd", "a=ice-pwd:" + "p" * 22, "", "c=IN IP4 0.0.0.0"])
lines = st.one_of(candidate_lines(), known, st.text(max_size=40))
fragments = st.one_of(st.lists(st.one_of(candidate_lines(), known), max_size=MAX_CANDIDATES + 4),
                      st.lists(lines, max_size=8)).map("\r\n".join)


@fuzz(400)
@given(fragments)
def test_fragments_parse_within_bounds_or_are_refused(text: str) -> None:
    try:
        frag = parse_fragment(text)
    except ValueError:
        return
    assert len(frag.candidates) <= MAX_CANDIDATES
    for _, value in frag.candidates:
        candidate = candidate_from_sdp(value)  # what the server hands aiortc
        assert 1 <= candidate.port <= 65535 and candidate.component >= 1
        assert candidate.protocol.lower() in ("udp", "tcp")


@fuzz(200)
@given(st.lists(st.integers(0, MAX_CANDIDATES), max_size=20), st.integers(1, 8), st.integers(1, 64))
def test_a_resources_budget_is_never_overspent(sizes: list[int], fragments: int, candidates: int) -> None:
    budget = TrickleBudget(fragments, candidates)
    spent_fragments = spent_candidates = 0
    for n in sizes:
        try:
            budget.spend(Fragment(candidates=[(None, "")] * n))
        except ValueError:
            continue
        spent_fragments, spent_candidates = spent_fragments + 1, spent_candidates + n
    assert spent_fragments <= fragments and spent_candidates <= candidates
