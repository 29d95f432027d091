"""The node's ``/metrics``: the front's own and every web process's, in one exposition, each
series labelled with the ``process`` it came from (``front``, ``web-0``, ...)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

LABEL = "process"


class _Gathered:
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def merged_metrics(texts: Mapping[str, str]) -> bytes:
    """One exposition of the expositions ``texts`` (process name -> text); a family that several
    processes have is one family with every process's samples."""
    families: dict[str, Metric] = {}
    for process, text in texts.items():
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            merged.samples += [Sample(s.name, {**s.labels, LABEL: process}, s.value, s.timestamp, s.exemplar)
                               for s in family.samples]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Gathered(list(families.values())))
    return generate_latest(registry)
