"""Quality presets: pipelines that share one set of loaded weights and differ in schedule only.

``quality`` keeps the I-chunk seam pass; ``fast`` turns it off, trading seam smoothness
for about one chunk less latency (DESIGN.md, "N chunks and I chunks").
"""

from __future__ import annotations

from engine.pipeline import Pipeline


def preset_pipelines(base: Pipeline) -> dict[str, Pipeline]:
    """``base`` as loaded, plus its sibling with the other interpolation setting."""
    interp = base.config.schedule.interp
    sibling = base.with_interp(not interp)
    with_interp, without = (base, sibling) if interp else (sibling, base)
    return {"quality": with_interp, "fast": without}
