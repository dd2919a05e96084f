"""The simulated platform under the schedule: a finite simulator log released over the run,
behind the events route whose faults the schedule switches on and off."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from bench.faults.schedule import Kind
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


def expected_spans(logs: Logs) -> set[str]:
    """Every span id the logs make: what the collector must hold at the end, each once."""
    sink = _Collect()
    p = Pipeline(traces=sink)
    for wl, evs in logs.items():
        lg = p.workload(wl)
        for ev in evs:
            lg.offer(ev)
    sink.shutdown()
    return set(sink.ids)


class ScheduledFaults(FaultPlan):
    """Route faults on while the schedule has them on: each request in a window is faulted
    with probability one half, so the exporters still make progress through it."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.until: dict[Kind, float] = {}
        self.rng_faults = random.Random(seed ^ 0x5EED)
        self.injected: Counter[str] = Counter()

    def switch_on(self, kind: Kind, duration_s: float) -> None:
        self.until[kind] = max(self.until.get(kind, 0.0), time.monotonic() + duration_s)

    def heal(self) -> None:
        self.until.clear()

    def take(self, workload: str, after: int, head: int) -> Fault | None:
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
    """Releases the logs to the route in proportion to the run's elapsed time."""

    route: RouteServer
    logs: Logs

    def __post_init__(self) -> None:
        self.fed = dict.fromkeys(self.logs, 0)

    def to(self, fraction: float) -> None:
        for w, evs in self.logs.items():
            upto = max(self.fed[w], int(len(evs) * min(1.0, fraction)))
            if upto > self.fed[w]:
                self.route.append(w, evs[self.fed[w]:upto])
                self.fed[w] = upto
