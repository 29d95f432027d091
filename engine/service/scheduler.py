"""Which sessions' chunks one engine worker runs next, batched, and how close each is to missing.

Pure logic over clock seconds: the worker passes ``now`` (when it is next free) and every
session's next chunk that is ready to run; nothing here sleeps or reads a clock.

Priority: speaking sessions by earliest deadline, then idle ones by earliest deadline, so an
idle session (driven by silence) never takes the device from a speaking one. Execution is
not preemptive: a speaking chunk that becomes ready while an idle batch runs waits for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

DEFAULT_MAX_BATCH = 16
FIT_EPS_S = 1e-9  # float rounding of summed costs must not flip an exact fit


class Costs(Protocol):
    """What the scheduler needs of a cost model (``engine.service.costs.CostModel``)."""

    def estimate(self, cost_key: Hashable, batch_size: int) -> float: ...


@dataclass(frozen=True)
class Candidate:
    """One session's next chunk, ready to run."""

    session: str
    key: Hashable  # equal keys may share one batched call
    cost_key: Hashable  # what the cost model measures that call under
    deadline: float  # clock seconds by which the chunk must have finished
    speaking: bool  # False: the session is idle, driven by silence


@dataclass(frozen=True)
class Batch:
    """Chunks of one key run as one call from ``start``, expected to take ``estimate_s``."""

    members: tuple[Candidate, ...]
    start: float
    estimate_s: float

    @property
    def finish(self) -> float:
        return self.start + self.estimate_s


Estimate = Callable[[Hashable, int], float]


def _priority(c: Candidate) -> tuple[bool, float, str]:
    return (not c.speaking, c.deadline, c.session)


def _memo(costs: Costs) -> Estimate:
    """``costs.estimate`` remembered for one planning call (costs do not change during it)."""
    seen: dict[tuple[Hashable, int], float] = {}

    def estimate(cost_key: Hashable, n: int) -> float:
        if (cost_key, n) not in seen:
            seen[(cost_key, n)] = costs.estimate(cost_key, n)
        return seen[(cost_key, n)]

    return estimate


def _plan(now: float, ordered: Sequence[Candidate], estimate: Estimate, margin_s: float,
          max_batch: int) -> Batch:
    """The batch headed by ``ordered[0]``; ``ordered`` is in priority order.

    "Alone" below means: in a batch of one right after the head's batch of one. A member
    must finish by its deadline - margin, or, if it could not even alone, no later than
    alone; the head is exempt when it is late on its own. The most urgent speaking candidate
    of another key (one that cannot share this call) must still make its deadline after this
    batch, unless it could not even after the head alone; same-key candidates get their turn
    to join in priority order instead. The first candidate that breaks a rule ends the batch.
    """
    head = ordered[0]
    cost = estimate(head.cost_key, 1)
    head_alone = now + cost
    bound = math.inf if head_alone > head.deadline - margin_s else head.deadline - margin_s
    other = next((c for c in ordered if c.speaking and c.key != head.key), None)
    if other is not None:
        other_cost = estimate(other.cost_key, 1)
        if head_alone + other_cost <= other.deadline - margin_s:
            bound = min(bound, other.deadline - margin_s - other_cost)
    members = [head]
    for c in ordered[1:]:
        if len(members) >= max_batch:
            break
        if c.key != head.key:
            continue
        trial = estimate(head.cost_key, len(members) + 1)
        if head.speaking and not c.speaking and trial > cost:
            break  # an idle session joins a speaking batch only for free
        own_bound = max(c.deadline - margin_s, head_alone + estimate(c.cost_key, 1))
        if now + trial > min(bound, own_bound):
            break
        members.append(c)
        bound = min(bound, own_bound)
        cost = trial
    return Batch(tuple(members), now, cost)


def plan_batch(now: float, candidates: Sequence[Candidate], costs: Costs, *, margin_s: float = 0.0,
               max_batch: int = DEFAULT_MAX_BATCH) -> Batch | None:
    """The batch to run at ``now``: the most urgent candidate and those that may share its call.

    Members join in priority order while every member still finishes by its deadline -
    ``margin_s`` (a late head: while the others are no later than alone), while the most urgent
    speaking candidate of another key still makes its deadline after the batch, and, for an
    idle candidate joining a speaking batch, while the batch costs no more with it. The batch
    cost is ``costs.estimate(head.cost_key, len(members))``: equal keys share a cost key.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch}")
    if not candidates:
        return None
    return _plan(now, sorted(candidates, key=_priority), _memo(costs), margin_s, max_batch)


def plan_all(now: float, candidates: Sequence[Candidate], costs: Costs, *, margin_s: float = 0.0,
             max_batch: int = DEFAULT_MAX_BATCH) -> list[Batch]:
    """The batches ``plan_batch`` would pick one after another until every candidate ran,
    each starting when the one before is expected to finish."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch}")
    estimate = _memo(costs)
    pending = sorted(candidates, key=_priority)
    batches: list[Batch] = []
    t = now
    while pending:
        batch = _plan(t, pending, estimate, margin_s, max_batch)
        batches.append(batch)
        chosen = {id(m) for m in batch.members}
        pending = [c for c in pending if id(c) not in chosen]
        t = batch.finish
    return batches


def project_slack(now: float, candidates: Sequence[Candidate], costs: Costs, *, margin_s: float = 0.0,
                  max_batch: int = DEFAULT_MAX_BATCH) -> dict[str, float]:
    """Each session's deadline minus its projected finish under ``plan_all`` (negative: a miss
    is coming); a session with several candidates gets its smallest slack. ``margin_s`` shapes
    the batches as in ``plan_batch``; it is not taken off the slack."""
    slack: dict[str, float] = {}
    for batch in plan_all(now, candidates, costs, margin_s=margin_s, max_batch=max_batch):
        for m in batch.members:
            slack[m.session] = min(slack.get(m.session, math.inf), m.deadline - batch.finish)
    return slack


MOST_SESSIONS = 256  # the most sessions one worker counts room for


def sessions_in_real_time(costs: Costs, work_per_period: Sequence[Hashable], period_s: float, *,
                          margin: float = 0.2, limit: int = MOST_SESSIONS) -> int:
    """The largest n (at most ``limit``; 0 if none) such that n sessions, each needing one call
    of every cost key in ``work_per_period`` per ``period_s``, batched n at a time, fit in
    ``(1 - margin) * period_s``. Every n is tried, so a non-monotone estimate cannot hide a fit."""
    if not work_per_period:
        raise ValueError("work_per_period names no work")
    budget = (1.0 - margin) * period_s + FIT_EPS_S
    fits = [n for n in range(1, limit + 1) if sum(costs.estimate(k, n) for k in work_per_period) <= budget]
    return max(fits, default=0)


Reason = Literal["overload", "recovered", "warm_start"]
REASONS: tuple[Reason, ...] = ("overload", "recovered", "warm_start")


@dataclass(frozen=True)
class QualityChange:
    """A session moved from level ``old`` to ``new`` (0 is best) at clock time ``at``."""

    session: str
    old: int
    new: int
    reason: Reason
    at: float


@dataclass
class _Track:
    levels: int
    level: int
    hold_s: float
    warming: bool  # still climbing from its start level, never overloaded since
    above_since: float | None = None  # start of the current run of slack above up_slack_s
    last_down: float = -math.inf
    last_up: float = -math.inf


class QualityController:
    """Moves sessions along their quality ladder from projected slack, with hysteresis.

    Down one level as soon as slack is negative, at most once per ``down_dwell_s``. Up one
    level once slack stayed above ``up_slack_s`` for the session's hold (``up_hold_s`` at
    first); slack between 0 and ``up_slack_s`` changes nothing, so slack sitting near zero
    cannot make a level flap. A raise undone sooner than the hold that earned it (or than
    ``undo_window_s``, if longer) was premature: the hold is multiplied by ``backoff``, up to
    ``max_hold_s``. A raise that lasted longer divides it by ``backoff`` again, down to
    ``up_hold_s``, so a session that was once unlucky recovers quickly after later overloads.
    """

    def __init__(self, *, down_dwell_s: float = 1.0, up_slack_s: float = 0.1, up_hold_s: float = 3.0,
                 backoff: float = 2.0, max_hold_s: float = 120.0, undo_window_s: float = 0.0) -> None:
        if backoff < 1.0:
            raise ValueError(f"backoff must be at least 1, got {backoff}")
        self.down_dwell_s = down_dwell_s
        self.up_slack_s = up_slack_s
        self.up_hold_s = up_hold_s
        self.backoff = backoff
        self.max_hold_s = max(max_hold_s, up_hold_s)
        self.undo_window_s = undo_window_s
        self._tracks: dict[str, _Track] = {}
        self._counts = dict.fromkeys(REASONS, 0)

    def add(self, session: str, levels: int, start_level: int = 0) -> None:
        """Track a new session with ``levels`` quality levels, starting at ``start_level``."""
        if levels < 1 or not 0 <= start_level < levels:
            raise ValueError(f"start level {start_level} is not one of {levels} levels")
        self._tracks[session] = _Track(levels, start_level, self.up_hold_s, warming=start_level > 0)

    def remove(self, session: str) -> None:
        self._tracks.pop(session, None)

    def level(self, session: str) -> int:
        return self._tracks[session].level

    def hold(self, session: str) -> float:
        """Seconds of good slack this session needs now before its next raise."""
        return self._tracks[session].hold_s

    def update(self, session: str, slack_s: float, now: float) -> QualityChange | None:
        """Feed one projected slack; returns the level change it causes, if any."""
        t = self._tracks[session]
        if slack_s < 0:
            t.above_since = None
            if t.level + 1 >= t.levels or now - t.last_down < self.down_dwell_s:
                return None
            if t.last_up > t.last_down:  # this undoes a raise: was it premature?
                if now - t.last_up < max(self.undo_window_s, t.hold_s):
                    t.hold_s = min(t.hold_s * self.backoff, self.max_hold_s)
                else:
                    t.hold_s = max(t.hold_s / self.backoff, self.up_hold_s)
            t.last_down = now
            t.warming = False
            return self._move(session, t, +1, "overload", now)
        if slack_s <= self.up_slack_s:
            t.above_since = None
            return None
        if t.above_since is None:
            t.above_since = now
        if t.level == 0 or now - t.above_since < t.hold_s:
            return None
        t.above_since = now
        t.last_up = now
        return self._move(session, t, -1, "warm_start" if t.warming else "recovered", now)

    def _move(self, session: str, t: _Track, step: int, reason: Reason, now: float) -> QualityChange:
        old = t.level
        t.level += step
        self._counts[reason] += 1
        return QualityChange(session, old, t.level, reason, now)

    def counts(self) -> dict[str, int]:
        """Level changes so far, per reason (every reason present, zero or not)."""
        return dict(self._counts)
