"""The replay's summary: exact percentiles per workload and the anomaly counts, as rows that
the text summary (`replay --summary`) and the HTML report (`replay --report`) both print."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.workload import WorkloadMetrics
from exporter.wiring.events import Pipeline

EXPIRE_EVERY = 50_000  # lines between idle-unit sweeps (event clock)


@runtime_checkable
class Sampled(Protocol):
    """An observer keeping every headline duration: SummaryMetrics, or the report's."""

    @property
    def samples(self) -> Mapping[str, list[int]]: ...


class SummaryMetrics(WorkloadMetrics):
    """Keeps every headline duration too, so the summary's percentiles are exact."""

    def __init__(self, registry: Registry, workload: str) -> None:
        super().__init__(registry, workload)
        self.samples: dict[str, list[int]] = defaultdict(list)

    def ready(self, unit_id: str, ns: int) -> None:
        super().ready(unit_id, ns)
        self.samples["ready"].append(ns)

    def allocation(self, unit_id: str, outcome: str, ack_ns: int | None) -> None:
        super().allocation(unit_id, outcome, ack_ns)
        if ack_ns is not None:
            self.samples["allocation_ack"].append(ack_ns)

    def drain(self, unit_id: str, reason: str, ns: int) -> None:
        super().drain(unit_id, reason, ns)
        self.samples["drain"].append(ns)


def quantile(sorted_ns: Sequence[int], q: float) -> float:
    """Nearest-rank quantile in seconds."""
    if not sorted_ns:
        return math.nan
    i = max(0, math.ceil(q * len(sorted_ns)) - 1)
    return sorted_ns[i] / 1e9


def _counter(registry: Registry, name: str, workload: str) -> int:
    fam = registry.counter(name)
    return int(sum(s.value for k, s in fam.series.items() if k[0] == workload))


ANOMALIES = (
    ("duplicates", "zaroz_events_duplicate_total"),
    ("gaps", "zaroz_events_gaps_total"),
    ("missing", "zaroz_events_missing_total"),
    ("invalid", "zaroz_events_invalid_total"),
    ("clock skew", "zaroz_events_clock_skew_total"),
)


MEASURES = ("ready", "allocation_ack", "drain")


def summary_rows(pipeline: Pipeline) -> list[tuple[str, ...]]:
    """(workload, measurement, count, p50, p95, p99) as the summary prints them (seconds, 6
    decimals, "-" without data); the report shows the same rows."""
    rows = []
    for wl, log in pipeline.logs.items():
        obs = log.obs
        if not isinstance(obs, Sampled):
            raise TypeError("the summary needs observers that keep their samples")
        for m in MEASURES:
            xs = sorted(obs.samples.get(m, ()))
            qs = [quantile(xs, q) for q in (0.5, 0.95, 0.99)]
            rows.append((wl, m, str(len(xs)), *(f"{v:.6f}" if v == v else "-" for v in qs)))
    return rows


def anomaly_rows(pipeline: Pipeline) -> list[tuple[str, ...]]:
    """(workload, events, each of ANOMALIES, unknown types) as counts."""
    reg = pipeline.registry
    rows = []
    ev = reg.counter("zaroz_events_total")
    for wl in pipeline.logs:
        unknown = sum(s.value for k, s in ev.series.items() if k == (wl, "unknown"))
        rows.append((
            wl, str(_counter(reg, "zaroz_events_total", wl)),
            *(str(_counter(reg, n, wl)) for _, n in ANOMALIES), str(int(unknown)),
        ))
    return rows
