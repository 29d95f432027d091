"""How many examples each property-based fuzz test draws: a bounded number in the default run (the
whole suite stays under its time budget), that number times ``AVATAR_FUZZ_SCALE`` in the longer
on-demand run (``tests/test_fuzz_long.py``, marker ``slow``), which also draws fresh examples each
time instead of the default run's fixed ones."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SCALE = int(os.environ.get("AVATAR_FUZZ_SCALE", "1"))
LONG_SCALE = 20  # what the on-demand run sets


def fuzz(examples: int) -> settings:
    """Hypothesis settings for a fuzz test drawing ``examples`` examples in the default run."""
    return settings(max_examples=examples * SCALE, deadline=None, derandomize=SCALE == 1, database=None,
                    suppress_health_check=list(HealthCheck))
