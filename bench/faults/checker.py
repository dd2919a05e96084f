"""The end compared with the truth (docs/measurements.md): every event-log counter and
histogram of each workload, from the one shard that owns it, equal to what the simulated
platform's truth implies for the log it served; no other shard exporting it. Along the way
(each scrape, `bounds`): no count above the truth's, no workload on a shard that does not own
it.

A workload with ranges lost for good (platform.holes) is compared with its log replayed
through the model as the route serves it (each range given up, as a tailer does on its 410):
the simulator's truth holds the lost events, and what the model makes of a unit whose events
were lost (a ready never seen) is the model's definition, held by its own tests."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from bench.faults.platform import replay
from bench.faults.scrapers import Key, parse, workloads_in
from exporter import catalog, vocabulary
from exporter.model.sharding import shard_of
from exporter.sinks.metrics.exposition import render
from exporter.sinks.metrics.series import format_value
from exporter.wiring.events import Pipeline
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


def ownership(report: Report, scrapes: dict[int, dict[Key, float]], workloads: list[str],
              shards: int) -> None:
    """Each workload exported by exactly one shard: the one `shard_of` names."""
    for index, samples in scrapes.items():
        mine = {w for w in workloads if shard_of(w, shards) == index}
        got = workloads_in(samples)
        report.check(got == mine, f"shard {index}/{shards} exports {sorted(got)}, "
                                  f"owns {sorted(mine)}")


# Gauges of the expected values: the end must equal them, but one may go down on the way.
GAUGES = ("zaroz_workload_desired_units",)


def expected(t: Truth, workload: str, *, duplicates: bool = False
             ) -> tuple[dict[Key, float], dict[Key, float]]:
    """What the truth implies for a workload's event-log families, as scrape samples: the
    counts (counters, histogram counts and buckets, two gauges) and the histogram sums. The
    end must show exactly these; no scrape before it may show a count above its value.
    `duplicates`: the same events come by two sources (route and webhook), so duplicates are
    counted and not expected to be 0."""
    wl = workload
    counts: dict[Key, float] = {}
    sums: dict[Key, float] = {}

    def key(name: str, **labels: str) -> Key:
        return (name, frozenset({"workload": wl, **labels}.items()))

    def hist(name: str, durations: list[int], **labels: str) -> None:
        counts[key(name + "_count", **labels)] = len(durations)
        sums[key(name + "_sum", **labels)] = sum(durations) / NS
        for b in catalog.get(name).buckets:
            counts[key(name + "_bucket", le=format_value(b), **labels)] = sum(
                1 for d in durations if d <= round(b * NS))

    hist("zaroz_unit_ready_seconds", t.ready.get(wl, []))
    hist("zaroz_unit_allocation_ack_seconds", t.allocation_ack.get(wl, []))
    for reason in DRAIN_REASONS:
        hist("zaroz_unit_drain_seconds", t.drain.get((wl, reason), []), reason=reason)
    for o in ("delivered", "undelivered", "superseded", "abandoned"):
        counts[key("zaroz_unit_allocations_total", outcome=o)] = t.allocations.get((wl, o), 0)
    for o in ("ready", "failed", "destroyed"):
        counts[key("zaroz_unit_startups_total", outcome=o)] = t.startups.get((wl, o), 0)
    for m in ("ready", "allocation_ack", "drain"):
        counts[key("zaroz_events_clock_skew_total", measurement=m)] = t.skew.get((wl, m), 0)
    by_type: dict[str, int] = defaultdict(int)
    for (w, kind), n in t.events_by_type.items():
        if w == wl:
            by_type[kind if not kind.startswith("unit.future") else "unknown"] += n
    for kind, n in by_type.items():
        counts[key("zaroz_events_total", type=kind)] = n
    counts[key("zaroz_workload_desired_units")] = t.desired.get(wl, 0)
    counts[key("zaroz_events_last_seq")] = t.last_seq.get(wl, 0)
    for (w, code, restarted), n in t.exits.items():
        if w == wl:
            counts[key("zaroz_unit_exits_total", code=str(code),
                       restarted="true" if restarted else "false")] = n
    for (w, reason), n in t.failures.items():
        if w == wl:
            counts[key("zaroz_unit_failures_total", reason=reason)] = n
    for source in () if duplicates else vocabulary.EVENT_SOURCES:
        counts[key("zaroz_events_duplicate_total", source=source)] = 0
    counts[key("zaroz_events_gaps_total")] = 0
    counts[key("zaroz_events_invalid_total", reason="schema")] = 0
    return counts, sums


def replayed(workload: str, evs: list[dict[str, Any]],
             lost: list[tuple[int, int]]) -> dict[Key, float]:
    """The samples of one uninterrupted model that read `evs` with `lost` expired."""
    p = Pipeline()
    replay(p.workload(workload), evs, lost)
    samples, _ = parse(b"".join(render(p.registry, False)).decode())
    return samples


def expected_of(t: Truth, workload: str, evs: list[dict[str, Any]],
                lost: list[tuple[int, int]], *, duplicates: bool = False
                ) -> tuple[dict[Key, float], dict[Key, float]]:
    """`expected`, or with lost ranges the same families' samples from `replayed`."""
    counts, sums = expected(t, workload, duplicates=duplicates)
    if not lost:
        return counts, sums
    names = {k[0] for k in counts}
    sum_names = {k[0] for k in sums}
    families = names | sum_names
    got = {k: v for k, v in replayed(workload, evs, lost).items()
           if k[0] in families and dict(k[1]).get("workload") == workload}
    return ({k: got.get(k, 0.0) for k in counts.keys() | {k for k in got if k[0] in names}},
            {k: got.get(k, 0.0) for k in sums.keys() | {k for k in got if k[0] in sum_names}})


Expected = dict[str, tuple[dict[Key, float], dict[Key, float]]]  # workload -> counts, sums


def expectations(t: Truth, logs: dict[str, list[dict[str, Any]]],
                 lost: dict[str, list[tuple[int, int]]]) -> Expected:
    """`expected_of` for every workload, duplicates allowed (route and webhooks both deliver):
    made once, for the bounds along the way and the end alike."""
    return {w: expected_of(t, w, evs, lost.get(w, []), duplicates=True)
            for w, evs in logs.items()}


def truth(report: Report, samples: dict[Key, float],
          want: tuple[dict[Key, float], dict[Key, float]]) -> None:
    """What assert_matches_truth holds in the suite, as a list of findings: one workload's
    samples against its `expectations`."""
    counts, sums = want
    for k, v in counts.items():
        got = samples.get(k, 0.0)
        report.check(got == v, f"{_show(k)}: {got:g} != {v:g}")
    for k, v in sums.items():
        n = counts[(k[0].removesuffix("_sum") + "_count", k[1])]
        got = samples.get(k, 0.0)
        report.check(abs(got - v) <= 1e-6 * max(1, n), f"{_show(k)}: {got} != {v}")


def bounds(want: Expected) -> dict[Key, float]:
    """The counts no scrape may exceed at any time (the expected counts, without the gauges)."""
    out: dict[Key, float] = {}
    for counts, _ in want.values():
        out.update((k, v) for k, v in counts.items() if k[0] not in GAUGES)
    return out


def _show(k: Key) -> str:
    return f"{k[0]}{dict(sorted(k[1]))}"
