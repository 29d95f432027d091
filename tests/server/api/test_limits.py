"""Per-client creation limits on a fake clock: the minute window, unoffered sessions, Retry-After,
concurrent creations, separate clients, bounded memory."""

from __future__ import annotations

from server.api.limits import ClientLimits, client_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limits(per_minute: int = 30, max_unoffered: int = 4, timeout: float = 10.0) -> tuple[ClientLimits, Clock]:
    clock = Clock()
    return ClientLimits(per_minute, max_unoffered, timeout, clock), clock


def never_waiting(_sid: str) -> bool:
    return False


def test_creations_per_minute_are_a_sliding_window_with_retry_after():
    lim, clock = limits(per_minute=3)
    for i in range(3):
        assert lim.admit("a", never_waiting) is None
        lim.settle("a", f"s{i}")
        clock.now += 10
    refused = lim.admit("a", never_waiting)
    assert refused is not None and "3 a minute" in refused.message
    assert refused.retry_after_s == 30  # the first creation (t=1000) leaves the window at t=1060; now 1030
    clock.now += 29.5
    assert lim.admit("a", never_waiting).retry_after_s == 1
    clock.now += 0.5
    assert lim.admit("a", never_waiting) is None  # one slot back, not three
    assert lim.admit("a", never_waiting) is not None


def test_unoffered_sessions_are_capped_and_freed_when_offered_or_gone():
    lim, clock = limits(max_unoffered=2)
    waiting = {"s1", "s2"}
    for sid in ("s1", "s2"):
        assert lim.admit("a", waiting.__contains__) is None
        lim.settle("a", sid)
        clock.now += 2
    refused = lim.admit("a", waiting.__contains__)
    assert refused is not None and "waiting for their offer" in refused.message
    assert refused.retry_after_s == 6  # s1 (created at 1000) is reaped at its 10 s timeout; now 1004
    waiting.discard("s1")  # offered (or deleted, or reaped)
    assert lim.admit("a", waiting.__contains__) is None


def test_concurrent_creations_count_before_they_finish():
    lim, _ = limits(max_unoffered=2)
    assert lim.admit("a", never_waiting) is None
    assert lim.admit("a", never_waiting) is None
    assert lim.admit("a", never_waiting) is not None  # two still being created
    lim.settle("a", None)  # one failed (bad image, at capacity): it holds nothing
    assert lim.admit("a", never_waiting) is None


def test_clients_are_counted_apart_and_tokens_are_not_kept():
    lim, _ = limits(per_minute=1)
    assert lim.admit(client_key("10.0.0.1", None), never_waiting) is None
    assert lim.admit(client_key("10.0.0.1", None), never_waiting) is not None
    assert lim.admit(client_key("10.0.0.2", None), never_waiting) is None
    key = client_key("10.0.0.1", "server-secret")
    assert "server-secret" not in key and key == client_key("10.0.0.9", "server-secret")  # the token decides
    assert lim.admit(key, never_waiting) is None


def test_idle_clients_are_forgotten():
    lim, clock = limits(timeout=10.0)
    for i in range(2000):
        assert lim.admit(f"addr:{i}", never_waiting) is None
        lim.settle(f"addr:{i}", f"s{i}")
    assert len(lim) == 2000
    clock.now += 61
    lim.forget_idle()
    assert len(lim) == 0
    lim.admit("addr:busy", never_waiting)  # still being created: kept
    clock.now += 1000
    lim.forget_idle()
    assert len(lim) == 1
