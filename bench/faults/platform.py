"""The simulated platform under the schedule: a finite simulator log released over the run,
behind the events route whose faults the schedule switches on and off."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.faults.schedule import Fault as Scheduled
from bench.faults.schedule import Kind
from exporter.model.workload import WorkloadLog
from exporter.sinks.traces.builder import SpanRecord
from exporter.sinks.traces.otlp import TraceConfig, TraceSink
from exporter.wiring.events import Pipeline
from zaroz_sim.config import SimConfig
from zaroz_sim.faults import Fault, FaultKind, FaultPlan, drop, http_status, slow, truncate
from zaroz_sim.route import RouteServer
from zaroz_sim.scenario import Simulator
from zaroz_sim.truth import Truth

NS = 1_000_000_000
Logs = dict[str, list[dict[str, Any]]]
Holes = dict[str, list[tuple[int, int]]]  # workload -> seq ranges [first, last] lost for good


def finite_logs(seed: int, workloads: int, seconds: int, rate: float) -> tuple[Logs, Truth]:
    """Every event of `seconds` of simulated platform, units finished: the truth is final."""
    cfg = SimConfig(seed=seed, workloads=workloads, arrival_rate=rate)
    sim = Simulator(cfg)
    logs: Logs = {w.id: [] for w in cfg.workload_list()}
    end = cfg.start_ns + seconds * NS
    for part in (sim.events_until(end), sim.finish(end)):
        for wl, evs in part.items():
            logs[wl].extend(evs)
    return logs, sim.truth


def holes(schedule: list[Scheduled], logs: Logs, seconds: float) -> tuple[Holes, int]:
    """Where each ROUTE_410_LOSS fault lost its range: in the log of workload `target` (modulo
    the workloads), starting a few events past what the release has given out at the fault's
    time (no reader has it yet), 1 + 10 events a second of its duration long, ending before the
    log's last event (the head stays a seq that is served). A range that would touch an earlier
    one of its workload is skipped; returns the holes and how many were skipped."""
    names = list(logs)
    out: Holes = {}
    skipped = 0
    for f in schedule:
        if f.kind is not Kind.ROUTE_410_LOSS:
            continue
        w = names[f.target % len(names)]
        n = len(logs[w])
        first = int(n * min(1.0, f.at_s / (seconds * 0.85))) + 6
        last = min(n - 1, first + int(f.duration_s * 10))
        taken = out.setdefault(w, [])
        if first > last or any(a - 1 <= last and first <= b + 1 for a, b in taken):
            skipped += 1
            continue
        taken.append((first, last))
    return {w: sorted(r) for w, r in out.items() if r}, skipped


def replay(lg: WorkloadLog, evs: list[dict[str, Any]], lost: list[tuple[int, int]]) -> None:
    """A log into a model as the route serves it with `lost` expired: each range passed (as a
    tailer does on its 410) and its events never offered."""
    ranges = iter(sorted(lost))
    hole = next(ranges, None)
    for ev in evs:
        seq = ev["seq"]
        if hole is not None and seq >= hole[0]:
            if seq == hole[0]:
                lg.pass_to("route", hole[1])
            if seq <= hole[1]:
                continue
            hole = next(ranges, None)
        lg.offer(ev, "route")


class _Collect(TraceSink):
    """The spans one uninterrupted exporter ends, kept instead of exported."""

    def __init__(self) -> None:
        super().__init__(_Nowhere(), TraceConfig())  # type: ignore[arg-type]
        self.ids: list[str] = []

    def emit(self, r: SpanRecord) -> None:
        self.ids.append(f"{r.span_id:016x}")


class _Nowhere:
    def export_encoded(self, body: bytes, count: int) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def expected_spans(logs: Logs, lost: Holes | None = None) -> set[str]:
    """Every span id the logs make, less their `lost` ranges: what the collector must hold at
    the end, each once."""
    sink = _Collect()
    p = Pipeline(traces=sink)
    for wl, evs in logs.items():
        replay(p.workload(wl), evs, (lost or {}).get(wl, []))
    sink.shutdown()
    return set(sink.ids)


class ScheduledFaults(FaultPlan):
    """Route faults on while the schedule has them on: each request in a window is faulted
    with probability one half, so the exporters still make progress through it. A request
    whose cursor is just before a lost range, or in it, always gets its 410."""

    def __init__(self, seed: int, lost: Holes | None = None) -> None:
        super().__init__()
        self.lost = lost or {}
        self.until: dict[Kind, float] = {}
        self.rng_faults = random.Random(seed ^ 0x5EED)
        self.injected: Counter[str] = Counter()

    def switch_on(self, kind: Kind, duration_s: float) -> None:
        self.until[kind] = max(self.until.get(kind, 0.0), time.monotonic() + duration_s)

    def heal(self) -> None:
        self.until.clear()

    def take(self, workload: str, after: int, head: int) -> Fault | None:
        for first, last in self.lost.get(workload, ()):
            if first <= after + 1 <= last and head >= last:
                self.injected[str(Kind.ROUTE_410_LOSS)] += 1
                return Fault(FaultKind.EXPIRE, workload, 1, oldest_seq=last + 1, transient=True)
        now = time.monotonic()
        live = [k for k, t in self.until.items() if t > now]
        if not live or self.rng_faults.random() < 0.5:
            return None
        kind = self.rng_faults.choice(live)
        self.injected[str(kind)] += 1
        if kind is Kind.ROUTE_503:
            return http_status(503, self.rng_faults.choice((None, 0, 1)))
        if kind is Kind.ROUTE_DROP:
            return drop()
        if kind is Kind.ROUTE_TRUNCATE:
            return truncate()
        if kind is Kind.ROUTE_SLOW:
            return slow(self.rng_faults.uniform(0.1, 1.5), self.rng_faults.uniform(0.0, 0.2))
        return self._expire_at_cursor(workload, after)

    @staticmethod
    def _expire_at_cursor(workload: str, after: int) -> Fault:
        """A 410 at the contract's edge: retention said to start right at the cursor's next
        seq, so nothing is lost, and left where it is, so an exporter restarting from an older
        checkpoint still finds its events."""
        return Fault(FaultKind.EXPIRE, workload, 1, oldest_seq=after + 1, transient=True)


@dataclass
class Release:
    """Releases the logs to the route in proportion to the run's elapsed time. A lost range
    is in the route's log (its head passes it) but never served, and is released whole, so
    the head never stops inside one."""

    route: RouteServer
    logs: Logs
    lost: Holes = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.fed = dict.fromkeys(self.logs, 0)
        self.gone = {w: {s for a, b in r for s in range(a, b + 1)} for w, r in self.lost.items()}
        for w, seqs in self.gone.items():
            self.route.logs[w].lost.update(seqs)

    def to(self, fraction: float) -> None:
        for w, evs in self.logs.items():
            upto = max(self.fed[w], int(len(evs) * min(1.0, fraction)))
            for first, last in self.lost.get(w, ()):
                if first <= upto < last:  # the log's seqs are 1, 2, ...: upto is the head
                    upto = last
            if upto > self.fed[w]:
                self.route.append(w, evs[self.fed[w]:upto])
                self.fed[w] = upto
