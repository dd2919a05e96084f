"""The end compared with the truth (docs/measurements.md): every event-log counter and
histogram of each workload, from the one shard that owns it, equal to what the simulated
platform's truth implies for the log it served; no other shard exporting it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from bench.faults.scrapers import Key
from exporter import catalog, vocabulary
from exporter.model.sharding import shard_of
from exporter.sinks.metrics.series import format_value
from zaroz_sim.truth import Truth

NS = 1_000_000_000
HISTOGRAMS = ("zaroz_unit_ready_seconds", "zaroz_unit_allocation_ack_seconds")
DRAIN_REASONS = ("stop", "destroy", "replace", "scale_down", "unknown")


@dataclass
class Report:
    held: int = 0
    failed: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        if ok:
            self.held += 1
        else:
            self.failed.append(what)


def _get(samples: dict[Key, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def workloads_in(samples: dict[Key, float]) -> set[str]:
    return {dict(labels)["workload"] for name, labels in samples
            if name.startswith(("zaroz_events_", "zaroz_unit_")) and "workload" in dict(labels)}


def ownership(report: Report, scrapes: dict[int, dict[Key, float]], workloads: list[str],
              shards: int) -> None:
    """Each workload exported by exactly one shard: the one `shard_of` names."""
    for index, samples in scrapes.items():
        mine = {w for w in workloads if shard_of(w, shards) == index}
        got = workloads_in(samples)
        report.check(got == mine, f"shard {index}/{shards} exports {sorted(got)}, "
                                  f"owns {sorted(mine)}")


def truth(report: Report, samples: dict[Key, float], t: Truth, workload: str, *,
          duplicates: bool = False) -> None:
    """What assert_matches_truth holds in the suite, as a list of findings; `duplicates`: the
    same events came by two sources (route and webhook), so duplicates are counted, not 0."""
    wl = workload

    def hist(name: str, durations: list[int], **labels: str) -> None:
        count = _get(samples, name + "_count", workload=wl, **labels)
        total = _get(samples, name + "_sum", workload=wl, **labels)
        report.check(count == len(durations), f"{name}_count{labels} {wl}: {count:g} != "
                                              f"{len(durations)}")
        report.check(abs(total - sum(durations) / NS) <= 1e-6 * max(1, len(durations)),
                     f"{name}_sum{labels} {wl}: {total} != {sum(durations) / NS}")
        for b in catalog.get(name).buckets:
            got = _get(samples, name + "_bucket", workload=wl, le=format_value(b), **labels)
            want = sum(1 for d in durations if d <= round(b * NS))
            report.check(got == want, f"{name}_bucket{{le={b}}}{labels} {wl}: {got:g} != {want}")

    def counter(name: str, want: int, **labels: str) -> None:
        got = _get(samples, name, workload=wl, **labels)
        report.check(got == want, f"{name}{labels} {wl}: {got:g} != {want}")

    hist("zaroz_unit_ready_seconds", t.ready.get(wl, []))
    hist("zaroz_unit_allocation_ack_seconds", t.allocation_ack.get(wl, []))
    for reason in DRAIN_REASONS:
        hist("zaroz_unit_drain_seconds", t.drain.get((wl, reason), []), reason=reason)
    for o in ("delivered", "undelivered", "superseded", "abandoned"):
        counter("zaroz_unit_allocations_total", t.allocations.get((wl, o), 0), outcome=o)
    for o in ("ready", "failed", "destroyed"):
        counter("zaroz_unit_startups_total", t.startups.get((wl, o), 0), outcome=o)
    for m in ("ready", "allocation_ack", "drain"):
        counter("zaroz_events_clock_skew_total", t.skew.get((wl, m), 0), measurement=m)
    by_type: dict[str, int] = defaultdict(int)
    for (w, kind), n in t.events_by_type.items():
        if w == wl:
            by_type[kind if not kind.startswith("unit.future") else "unknown"] += n
    for kind, n in by_type.items():
        counter("zaroz_events_total", n, type=kind)
    counter("zaroz_workload_desired_units", t.desired.get(wl, 0))
    counter("zaroz_events_last_seq", t.last_seq.get(wl, 0))
    for (w, code, restarted), n in t.exits.items():
        if w == wl:
            counter("zaroz_unit_exits_total", n, code=str(code),
                    restarted="true" if restarted else "false")
    for (w, reason), n in t.failures.items():
        if w == wl:
            counter("zaroz_unit_failures_total", n, reason=reason)
    for source in () if duplicates else vocabulary.EVENT_SOURCES:
        counter("zaroz_events_duplicate_total", 0, source=source)
    counter("zaroz_events_gaps_total", 0)
    counter("zaroz_events_invalid_total", 0, reason="schema")
