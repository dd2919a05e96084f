"""Finite simulator logs and the exporter's view of them, shared by accuracy tests."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from exporter import catalog, vocabulary
from exporter.sinks.metrics.series import format_value
from zaroz_sim.scenario import SimConfig, Simulator, Truth

NS = 1_000_000_000


def finite_logs(seed: int = 7, workloads: int = 2, seconds: int = 600,
                rate: float = 0.5, start_ns: int | None = None,
                ) -> tuple[dict[str, list[dict[str, Any]]], Truth]:
    cfg = SimConfig(seed=seed, workloads=workloads, arrival_rate=rate)
    if start_ns is not None:
        cfg.start_ns = start_ns
    sim = Simulator(cfg)
    logs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for wl, evs in sim.events_until(cfg.start_ns + seconds * NS).items():
        logs[wl].extend(evs)
    for wl, evs in sim.finish(cfg.start_ns + seconds * NS).items():
        logs[wl].extend(evs)
    return dict(logs), sim.truth


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def assert_matches_truth(samples: dict, truth: Truth, workloads: list[str],
                         allow_duplicates: bool = False) -> int:
    """Exact counts, sums within 1 µs per observation. Returns the number of checks made."""
    checks = 0

    def hist(name: str, durations: list[int], **labels: str) -> None:
        nonlocal checks
        count = value(samples, name + "_count", **labels)
        total = value(samples, name + "_sum", **labels)
        assert count == len(durations), (name, labels, count, len(durations))
        assert abs(total - sum(durations) / NS) <= 1e-6 * max(1, len(durations)), (name, labels)
        for b in catalog.get(name).buckets:
            got = value(samples, name + "_bucket", le=format_value(b), **labels)
            assert got == sum(1 for d in durations if d <= round(b * NS)), (name, labels, b)
        checks += 2

    def counter(name: str, expected: int, **labels: str) -> None:
        nonlocal checks
        assert value(samples, name, **labels) == expected, (name, labels, expected)
        checks += 1

    for wl in workloads:
        hist("zaroz_unit_ready_seconds", truth.ready.get(wl, []), workload=wl)
        hist("zaroz_unit_allocation_ack_seconds", truth.allocation_ack.get(wl, []), workload=wl)
        for reason in ("stop", "destroy", "replace", "scale_down", "unknown"):
            hist("zaroz_unit_drain_seconds", truth.drain.get((wl, reason), []), workload=wl,
                 reason=reason)
        for o in ("delivered", "undelivered", "superseded", "abandoned"):
            counter("zaroz_unit_allocations_total", truth.allocations.get((wl, o), 0),
                    workload=wl, outcome=o)
        for o in ("ready", "failed", "destroyed"):
            counter("zaroz_unit_startups_total", truth.startups.get((wl, o), 0), workload=wl,
                    outcome=o)
        for m in ("ready", "allocation_ack", "drain"):
            counter("zaroz_events_clock_skew_total", truth.skew.get((wl, m), 0), workload=wl,
                    measurement=m)
        by_type: dict[str, int] = defaultdict(int)
        for (w, t), n in truth.events_by_type.items():
            if w == wl:
                by_type[t if not t.startswith("unit.future") else "unknown"] += n
        for t, n in by_type.items():
            counter("zaroz_events_total", n, workload=wl, type=t)
        counter("zaroz_workload_desired_units", truth.desired[wl], workload=wl)
        counter("zaroz_events_last_seq", truth.last_seq[wl], workload=wl)
        for (w, code, restarted), n in truth.exits.items():
            if w == wl:
                counter("zaroz_unit_exits_total", n, workload=wl, code=str(code),
                        restarted="true" if restarted else "false")
        for (w, reason), n in truth.failures.items():
            if w == wl:
                counter("zaroz_unit_failures_total", n, workload=wl, reason=reason)
        if not allow_duplicates:
            for source in vocabulary.EVENT_SOURCES:
                counter("zaroz_events_duplicate_total", 0, workload=wl, source=source)
        counter("zaroz_events_gaps_total", 0, workload=wl)
        counter("zaroz_events_invalid_total", 0, workload=wl, reason="schema")
    return checks
