"""What one batched engine call costs, per cost key and batch size, measured as the worker runs.

The scheduler needs a cost for batch sizes it has not run yet (it asks "would adding one
more session still fit?"), so ``estimate`` fills the gaps from what was measured:

1. the measured size itself: an EWMA of its observed seconds;
2. other measured sizes of the same key, linear in batch size: between the two nearest
   measured sizes, or beyond them along the line through the two outermost ones. With one
   measured size ``b`` costing ``c``, a larger batch costs ``c * n / b`` (no further batching
   gain assumed) and a smaller one costs ``c``. A batch never costs less than any measured
   smaller batch, so noisy measurements cannot make growing a batch look free;
3. the mean of the same-size estimates of the other measured keys of the same kind (by
   default a tuple key's first part: ``("N", 3, True)`` is of kind ``"N"``);
4. ``prior_s`` per session, ``prior_s * n`` (no batching gain assumed), when nothing fits.

Costs measured at start-up (``set_baseline``) keep their shape across batch sizes, but the
machine's speed moves under them: on a CPU the web process's encoders and WebRTC stack take
cores from the engine once sessions stream, so a live batch of 1 runs slower than it did at
calibration, and the batch of 2 nobody has run since would look as cheap as it did then.
After a baseline is set, every observation of a baselined key and size also updates one
``load`` factor (observed / baseline, EWMA), and keys with a baseline are estimated as
``baseline × load``: what a size not run lately costs follows what the sizes run now cost.
One observation moves the factor as if it were at most ``LOAD_CLIP`` times slower (or faster)
than the baseline: a single stalled call (a page-fault storm, a neighbour's burst) must not
shut admission, while a machine that stays slower moves it all the way.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

JsonDict = dict[str, object]
LOAD_CLIP = 3.0


def kind_of(cost_key: Hashable) -> Hashable:
    """The default kind of a cost key: a tuple's first part, else the key itself."""
    if isinstance(cost_key, tuple) and cost_key:
        return cost_key[0]
    return cost_key


def label(cost_key: Hashable) -> str:
    """A cost key as a JSON object key: tuple parts joined by ``/``."""
    if isinstance(cost_key, tuple):
        return "/".join(str(part) for part in cost_key)
    return str(cost_key)


class _Ewma:
    """A running exponentially weighted mean and how many samples went into it."""

    __slots__ = ("value", "count")

    def __init__(self) -> None:
        self.value = 0.0
        self.count = 0

    def add(self, x: float, alpha: float) -> None:
        self.value = x if self.count == 0 else self.value + alpha * (x - self.value)
        self.count += 1


def _check(batch_size: int, seconds: float) -> None:
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    if not seconds >= 0:
        raise ValueError(f"a cost is a non-negative number of seconds, got {seconds}")


def _line(x0: int, y0: float, x1: int, y1: float, x: int) -> float:
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def from_measured(points: Mapping[int, float], n: int) -> float:
    """The cost of a batch of ``n`` from measured ``{batch size: seconds}`` of one key (rule 2)."""
    if n in points:
        return points[n]
    sizes = sorted(points)
    below = [b for b in sizes if b < n]
    above = [b for b in sizes if b > n]
    if not below:
        b0 = above[0]
        if len(above) == 1:
            return points[b0]
        guess = _line(b0, points[b0], above[1], points[above[1]], n)
        return min(max(guess, points[b0] * n / b0), points[b0])
    if above:
        lo, hi = below[-1], above[0]
        guess = _line(lo, points[lo], hi, points[hi], n)
    elif len(below) >= 2:
        lo, hi = below[-2], below[-1]
        guess = _line(lo, points[lo], hi, points[hi], n)
    else:
        guess = points[below[-1]] * n / below[-1]
    return max(guess, max(points[b] for b in below))


class CostModel:
    """EWMA costs per (cost key, batch size), with estimates for the sizes in between.

    ``alpha`` weighs the newest observation (0.2: about the last ten calls matter).
    ``prior_s`` is the per-session cost assumed before anything of a kind was measured;
    without it an estimate of a wholly unknown key raises ``KeyError``.
    """

    def __init__(self, *, alpha: float = 0.2, prior_s: float | None = None,
                 kind: Callable[[Hashable], Hashable] = kind_of, load_alpha: float = 0.2) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if prior_s is not None and prior_s < 0:
            raise ValueError(f"prior_s must be non-negative, got {prior_s}")
        if not 0 < load_alpha <= 1:
            raise ValueError(f"load_alpha must be in (0, 1], got {load_alpha}")
        self.alpha = alpha
        self.prior_s = prior_s
        self.kind = kind
        self.load_alpha = load_alpha
        self._costs: dict[Hashable, dict[int, _Ewma]] = {}
        self._stages: dict[tuple[Hashable, int], dict[str, _Ewma]] = {}
        self._baseline: dict[Hashable, dict[int, float]] = {}
        self._load = _Ewma()

    @classmethod
    def from_calibration(cls, calibration: Mapping[Hashable, Mapping[int, float]], **kwargs) -> CostModel:
        """A model whose baseline is ``calibration`` (another worker's :meth:`calibration` on the
        same engine and machine), as if it had measured those costs itself."""
        model = cls(**kwargs)
        for key, points in calibration.items():
            for batch_size, seconds in points.items():
                model.observe(key, batch_size, seconds)
        model.set_baseline()
        return model

    def calibration(self) -> dict[Hashable, dict[int, float]]:
        """The baseline's costs in seconds per (cost key, batch size): what start-up calibration measured."""
        return {key: dict(points) for key, points in self._baseline.items()}

    def set_baseline(self) -> None:
        """What was measured so far (start-up calibration) becomes the baseline; load restarts at 1."""
        self._baseline = {key: {b: e.value for b, e in points.items() if e.count}
                          for key, points in self._costs.items()}
        self._load = _Ewma()

    def forget_load(self) -> None:
        """The load factor back to 1: what the sessions that ran cost beside the web side's work for
        them says nothing once none runs (an idle worker that kept it would refuse every session,
        and with none running it would never learn otherwise)."""
        self._load = _Ewma()

    @property
    def load(self) -> float:
        """How much slower (> 1) or faster than at calibration the engine runs now."""
        return self._load.value if self._load.count else 1.0

    def observe(self, cost_key: Hashable, batch_size: int, seconds: float) -> None:
        """One batched call of ``batch_size`` sessions took ``seconds`` end to end."""
        _check(batch_size, seconds)
        self._costs.setdefault(cost_key, {}).setdefault(batch_size, _Ewma()).add(seconds, self.alpha)
        base = self._baseline.get(cost_key, {}).get(batch_size)
        if base:
            self._load.add(min(max(seconds / base, 1.0 / LOAD_CLIP), LOAD_CLIP), self.load_alpha)

    def observe_stages(self, cost_key: Hashable, batch_size: int, stages: Mapping[str, float]) -> None:
        """Where the seconds of one call went, per stage (for metrics; estimates use ``observe``)."""
        per_stage = self._stages.setdefault((cost_key, batch_size), {})
        for stage, seconds in stages.items():
            _check(batch_size, seconds)
            per_stage.setdefault(stage, _Ewma()).add(seconds, self.alpha)

    def count(self, cost_key: Hashable, batch_size: int) -> int:
        """How many calls of this key and size were observed."""
        point = self._costs.get(cost_key, {}).get(batch_size)
        return point.count if point else 0

    def _measured(self, cost_key: Hashable, batch_size: int) -> float | None:
        base = self._baseline.get(cost_key)
        if base:
            return from_measured(base, batch_size) * self.load
        points = self._costs.get(cost_key)
        if not points:
            return None
        return from_measured({b: e.value for b, e in points.items()}, batch_size)

    def estimate(self, cost_key: Hashable, batch_size: int) -> float:
        """Seconds one call of ``batch_size`` sessions of ``cost_key`` is expected to take."""
        if batch_size < 1:
            raise ValueError(f"batch size must be at least 1, got {batch_size}")
        own = self._measured(cost_key, batch_size)
        if own is not None:
            return own
        kind = self.kind(cost_key)
        kin = [self._measured(k, batch_size) for k in self._costs if self.kind(k) == kind]
        known = [x for x in kin if x is not None]
        if known:
            return sum(known) / len(known)
        if self.prior_s is not None:
            return self.prior_s * batch_size
        raise KeyError(f"no cost measured for {cost_key!r} or its kind, and no prior_s")

    def stage_ms(self) -> dict[str, float]:
        """Milliseconds per session per stage: each stage's per-member cost, averaged over calls."""
        sums: dict[str, float] = {}
        weights: dict[str, int] = {}
        for (_, batch_size), stages in self._stages.items():
            for stage, e in stages.items():
                sums[stage] = sums.get(stage, 0.0) + e.value / batch_size * e.count
                weights[stage] = weights.get(stage, 0) + e.count
        return {stage: 1000.0 * sums[stage] / weights[stage] for stage in sums}

    def snapshot(self) -> JsonDict:
        """JSON-able: ``{"costs": {key: {size: {"estimate_ms", "count"}}}, "stage_ms": {stage: ms}}``."""
        costs = {
            label(key): {str(b): {"estimate_ms": round(1000.0 * e.value, 3), "count": e.count}
                         for b, e in sorted(points.items())}
            for key, points in self._costs.items()
        }
        return {"costs": costs, "stage_ms": {k: round(v, 3) for k, v in self.stage_ms().items()},
                "load": round(self.load, 3)}
