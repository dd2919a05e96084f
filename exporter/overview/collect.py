"""The overview's data, read from the registry (and the UnitSignal table) at request time: one
JSON-able dict that `/api/overview` serves as is and the page renders."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from typing import Any, cast

from exporter import __version__, vocabulary
from exporter.model.unitsignals import Key
from exporter.overview.history import BOUNDS, MEASUREMENTS, History, Snapshot, delta, take
from exporter.overview.quantiles import bucket_quantile
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.series import CallbackSeries

WINDOW_S = 300.0  # "the last few minutes" of the percentiles
TREND_POINTS = 10  # p95 points over the window
QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
SIGNAL_LIMIT = 200  # UnitSignals listed per list (the page shows the oldest few)

Readiness = Callable[[], tuple[bool, str]]


def _num(v: float) -> float | None:
    """JSON has no NaN: no data is null."""
    return None if math.isnan(v) else round(v, 6)


def _by_workload(registry: Registry, name: str, label: int | None = None) -> dict[str, Any]:
    """Counter values per workload (summed), or per workload and the label at `label`."""
    out: dict[str, Any] = {}
    for key, s in registry.counter(name).series.items():
        v = int(s.value)
        if label is None:
            out[key[0]] = out.get(key[0], 0) + v
        else:
            per = out.setdefault(key[0], {})
            per[key[label]] = per.get(key[label], 0) + v
    return out


def _gauge(registry: Registry, name: str) -> dict[tuple[str, ...], float]:
    """Gauge values; those read at scrape time (CallbackSeries) are read now."""
    return {k: s.fn() if isinstance(s, CallbackSeries) else s.value
            for k, s in registry.gauge(name).series.items()}


def _measurement(base: Snapshot, snaps: list[Snapshot], wl: str, m: str) -> dict[str, Any]:
    """One workload's measurement over the window: `base` the snapshot the window starts at,
    `snaps` the trend's points ending with the current snapshot."""
    latest = snaps[-1].counts.get(wl, {}).get(m)
    d = delta(latest, base.counts.get(wl, {}).get(m))
    bounds = BOUNDS[m]
    counts = list(d) if d is not None else [0] * (len(bounds) + 1)
    out: dict[str, Any] = {"count": sum(counts)}
    for name, q in QUANTILES:
        out[name] = _num(bucket_quantile(q, bounds, counts))
    out["buckets"] = counts
    trend: list[float | None] = []
    for a, b in itertools.pairwise(snaps):
        step = delta(b.counts.get(wl, {}).get(m), a.counts.get(wl, {}).get(m))
        trend.append(_num(bucket_quantile(0.95, bounds, step)) if step else None)
    out["trend_p95"] = trend
    return out


def _signals(registry: Registry, now: float) -> dict[str, Any]:
    table = registry.table("zaroz_unitsignal_generation_lag").table
    if table is None:
        return UNWATCHED
    lagging: dict[Key, Any] = {}
    states = table.states
    # The only table with this column is UnitSignalMetrics.rows, keyed by (namespace, name).
    for key, slot in cast("dict[Key, int]", table.slots).items():
        s = states[slot]
        if s is not None and s.generation_lag > 0:
            lagging[key] = s
    return signal_summary(len(table), lagging, now)


UNWATCHED: dict[str, Any] = {"watched": False, "total": 0, "lagging": 0,
                             "oldest_unobserved": [], "stuck_invalid_spec": []}


def signal_summary(total: int, lagging: dict[Key, Any], now: float) -> dict[str, Any]:
    """The UnitSignals behind (`lagging`: key -> state) as the overview lists them."""
    behind = [(s.pending_since if s.pending_since is not None else now, key, s)
              for key, s in lagging.items()]
    invalid = [t for t in behind if t[2].stuck_invalid_spec]

    def row(since: float, key: tuple[str, str], s: Any) -> dict[str, Any]:
        return {"namespace": key[0], "name": key[1], "workload": s.workload,
                "unit_id": s.unit_id, "generation_lag": s.generation_lag,
                "unobserved_for_s": round(max(0.0, now - since), 3),
                "spec_valid": bool(s.spec_valid), "stuck_invalid_spec": bool(s.stuck_invalid_spec),
                "phase": s.phase}

    oldest = heapq.nsmallest(SIGNAL_LIMIT, behind, key=lambda t: (t[0], t[1]))
    stuck = heapq.nsmallest(SIGNAL_LIMIT, invalid, key=lambda t: (t[0], t[1]))
    return {"watched": True, "total": total, "lagging": len(behind),
            "stuck_invalid_spec_total": len(invalid),
            "oldest_unobserved": [row(*t) for t in oldest],
            "stuck_invalid_spec": [row(*t) for t in stuck]}


def _health(registry: Registry, readiness: Readiness, now: float,
            last_scrape: float | None) -> dict[str, Any]:
    ok, detail = readiness()
    caught = _gauge(registry, "zaroz_route_caught_up")
    synced = _gauge(registry, "zaroz_kube_synced")
    saves = _gauge(registry, "zaroz_checkpoint_last_success_timestamp_seconds")  # written or not
    saved_at = max((v for v in saves.values() if v > 0), default=None)
    return {
        "version": __version__, "ready": ok, "readiness": detail,
        "workloads_tailed": len(caught), "workloads_caught_up": sum(1 for v in caught.values()
                                                                   if v >= 1),
        "kube_scopes": len(synced), "kube_scopes_synced": sum(1 for v in synced.values() if v),
        "last_scrape_age_s": None if last_scrape is None else round(now - last_scrape, 3),
        "checkpoint_age_s": None if saved_at is None else round(now - saved_at, 3),
        "series": registry.series_count(),
    }


COUNTERS = (  # what the overview sums by workload: (key, family, label summed apart)
    ("events", "zaroz_events_total", None),
    ("startups", "zaroz_unit_startups_total", 1),
    ("allocations", "zaroz_unit_allocations_total", 1),
    ("gaps", "zaroz_events_gaps_total", None),
    ("missing", "zaroz_events_missing_total", None),
    ("duplicates", "zaroz_events_duplicate_total", None),
    ("invalid", "zaroz_events_invalid_total", None),
    ("skew", "zaroz_events_clock_skew_total", None),
)
ANOMALIES = ("gaps", "missing", "duplicates", "invalid", "skew")


def overview(registry: Registry, history: History, readiness: Readiness, now: float,
             last_scrape: float | None = None, window: float = WINDOW_S) -> dict[str, Any]:
    """The overview computed from scratch (every series, every row): what `Overview.data`
    keeps up to date incrementally (overview/aggregates.py), and what tests compare it with."""
    sums = {k: _by_workload(registry, fam, label) for k, fam, label in COUNTERS}
    current = take(registry, now)
    base = history.since(now, window)
    snaps = [*history.series(now, window, TREND_POINTS), current]

    def measure(wl: str, m: str) -> dict[str, Any]:
        return _measurement(base, snaps, wl, m)

    return assemble(registry, readiness, now, last_scrape, window, sums, current, measure,
                    _signals(registry, now))


def assemble(registry: Registry, readiness: Readiness, now: float, last_scrape: float | None,
             window: float, sums: dict[str, dict[str, Any]], current: Snapshot,
             measure: Callable[[str, str], dict[str, Any]], signals: dict[str, Any]
             ) -> dict[str, Any]:
    """The overview's dict from its parts (the counters' sums by workload, the histograms'
    current snapshot, each workload's measurements, the UnitSignals behind)."""
    events, startups, allocs = sums["events"], sums["startups"], sums["allocations"]
    tracked = _gauge(registry, "zaroz_workload_units_tracked")
    names = sorted(set(events) | {k[0] for k in tracked} | set(current.counts))
    workloads = []
    for wl in names:
        workloads.append({
            "workload": wl,
            "events": events.get(wl, 0),
            "units_tracked": int(tracked.get((wl,), 0)),
            "measurements": {m: measure(wl, m) for m, _ in MEASUREMENTS},
            "startups": {o: startups.get(wl, {}).get(o, 0) for o in vocabulary.STARTUP_OUTCOMES},
            "allocations": {o: allocs.get(wl, {}).get(o, 0)
                            for o in vocabulary.ALLOCATION_OUTCOMES},
            "anomalies": {k: sums[k].get(wl, 0) for k in ANOMALIES},
        })
    return {
        "generated_at": round(now, 3),
        "window_s": window,
        "bounds": {m: list(b) for m, b in BOUNDS.items()},
        "exporter": _health(registry, readiness, now, last_scrape),
        "workloads": workloads,
        "unitsignals": signals,
    }
