"""The live overview's data, kept up to date from what changed (overview/aggregates.py): the
same dict `collect.overview` computes from scratch, at a cost in proportion to the changes since
the last request (and one entry per workload), not to every series and UnitSignal row."""

from __future__ import annotations

from typing import Any

from exporter.overview.aggregates import HistogramSums, SignalIndex, Sums
from exporter.overview.collect import (
    COUNTERS,
    TREND_POINTS,
    UNWATCHED,
    WINDOW_S,
    Readiness,
    _measurement,
    assemble,
    signal_summary,
)
from exporter.overview.history import MEASUREMENTS, Counts, History, Snapshot
from exporter.sinks.metrics.family import Registry

SIGNAL_SLICE = 400  # table chunks read between two turns of the loop (`catch_up`)
SUMS_SLICE = 5_000  # counter series summed between two turns, on a first look (`catch_up`)


class Live:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.sums = {k: Sums(registry.counter(fam), label) for k, fam, label in COUNTERS}
        self.hists = {m: HistogramSums(registry.histogram(fam)) for m, fam in MEASUREMENTS}
        # workload -> measurement -> counts; an inner dict is replaced, never changed, so a
        # snapshot shares the unchanged ones (as history.take does)
        self.per_wl: dict[str, dict[str, Counts]] = {}
        for m, h in self.hists.items():
            for wl, c in h.counts.items():
                self.per_wl.setdefault(wl, {})[m] = c
        self.signals: SignalIndex | None = None
        # (workload, measurement) -> (the count tuples it was computed from, its result)
        self._measured: dict[tuple[str, str], tuple[tuple[Counts | None, ...], Any]] = {}

    def snapshot(self, at: float) -> Snapshot:
        """`history.take` of now, from the histograms' changes."""
        changed: set[str] = set()
        for h in self.hists.values():
            changed |= h.sync()
        for wl in changed:
            per = {m: c for m, h in self.hists.items() if (c := h.counts.get(wl)) is not None}
            if per:
                self.per_wl[wl] = per
            else:
                self.per_wl.pop(wl, None)
        return Snapshot(at, dict(self.per_wl))

    def catch_up(self) -> int:
        """Sum a slice of the counter series of a first look, else read a slice of the
        UnitSignal rows changed since the last look; returns how much is left (0: none; the web
        handler runs the loop between slices: a first look reads them all)."""
        for sums in self.sums.values():
            if sums.warming():
                sums.warm(SUMS_SLICE)
                return 1
        if self.signals is None:
            table = self.registry.table("zaroz_unitsignal_generation_lag").table
            if table is None:
                return 0
            self.signals = SignalIndex(table)
        return self.signals.sync(SIGNAL_SLICE)

    def _measure(self, base: Snapshot, snaps: list[Snapshot], wl: str, m: str) -> Any:
        inputs = (base.counts.get(wl, {}).get(m),
                  *[s.counts.get(wl, {}).get(m) for s in snaps])
        hit = self._measured.get((wl, m))
        if hit is not None and len(hit[0]) == len(inputs) and all(
                a is b for a, b in zip(hit[0], inputs, strict=True)):
            return hit[1]
        out = _measurement(base, snaps, wl, m)
        self._measured[(wl, m)] = (inputs, out)
        return out

    def data(self, history: History, readiness: Readiness, now: float,
             last_scrape: float | None = None, window: float = WINDOW_S) -> dict[str, Any]:
        sums = {k: s.sync() for k, s in self.sums.items()}
        current = self.snapshot(now)
        base = history.since(now, window)
        snaps = [*history.series(now, window, TREND_POINTS), current]
        names = set(current.counts)
        for key in [k for k in self._measured if k[0] not in names]:
            del self._measured[key]  # a workload gone
        if self.signals is None:
            self.catch_up()
        if self.signals is None:
            signals = UNWATCHED
        else:
            self.signals.sync()
            signals = signal_summary(len(self.signals.table), self.signals.lagging, now)
        return assemble(self.registry, readiness, now, last_scrape, window, sums, current,
                        lambda wl, m: self._measure(base, snaps, wl, m), signals)
