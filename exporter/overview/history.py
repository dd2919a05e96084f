"""A small ring of the headline histograms' bucket counts, so the overview can show the last
few minutes (the difference of two snapshots) instead of everything since start.

Snapshots are taken by the web layer on a timer; the model and the metrics never read a clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from exporter import catalog
from exporter.sinks.metrics.family import Registry

# What the page calls each headline histogram, and its family.
MEASUREMENTS = (
    ("ready", "zaroz_unit_ready_seconds"),
    ("ack", "zaroz_unit_allocation_ack_seconds"),
    ("drain", "zaroz_unit_drain_seconds"),
)
BOUNDS: dict[str, tuple[float, ...]] = {
    m: next(x.buckets for x in catalog.METRICS if x.name == fam) for m, fam in MEASUREMENTS
}

Counts = tuple[int, ...]


@dataclass(frozen=True)
class Snapshot:
    at: float  # seconds, the caller's clock
    # workload -> measurement -> bucket counts (not cumulative; drain summed over reasons)
    counts: dict[str, dict[str, Counts]]


def take(registry: Registry, at: float, prev: Snapshot | None = None) -> Snapshot:
    """The bucket counts now; a workload's unchanged counts share `prev`'s tuple, so an idle
    workload costs the ring no memory."""
    out: dict[str, dict[str, Counts]] = {}
    for m, fam in MEASUREMENTS:
        for labels, s in registry.histogram(fam).series.items():
            per = out.setdefault(labels[0], {})
            old = per.get(m)
            per[m] = tuple(s.counts) if old is None else tuple(
                a + b for a, b in zip(old, s.counts, strict=True))
    if prev is not None:
        for wl, per in out.items():
            before = prev.counts.get(wl)
            if before:
                for m, counts in per.items():
                    if before.get(m) == counts:
                        per[m] = before[m]
    return Snapshot(at, out)


def delta(new: Counts | None, old: Counts | None) -> Counts | None:
    """new - old, or new when old is missing; None when there is nothing new."""
    if new is None:
        return None
    if old is None:
        return new
    d = tuple(a - b for a, b in zip(new, old, strict=True))
    return d if all(x >= 0 for x in d) else new  # a reset (restart): the new counts stand alone


class History:
    """Snapshots every `step` seconds over `keep` seconds. The first one is all zeros (taken
    before anything was applied, or standing in for it), so a window longer than the uptime
    covers everything seen so far."""

    def __init__(self, registry: Registry, *, step: float = 10.0, keep: float = 330.0,
                 snapshot: Callable[[float], Snapshot] | None = None) -> None:
        """`snapshot(at)`: the counts now, as `take` gives them (the live overview keeps them
        up to date from the changes instead of reading every series)."""
        self.registry = registry
        self.step = step
        self.ring: deque[Snapshot] = deque(maxlen=int(keep / step) + 2)
        self.snapshot = snapshot

    def tick(self, now: float) -> None:
        if not self.ring:
            self.ring.append(Snapshot(now, {}))
        if now - self.ring[-1].at >= self.step * 0.5:
            self.ring.append(take(self.registry, now, self.ring[-1]) if self.snapshot is None
                             else self.snapshot(now))

    def since(self, now: float, window: float) -> Snapshot:
        """The newest snapshot at least `window` old, else the oldest held."""
        base = self.ring[0] if self.ring else Snapshot(now, {})
        for s in self.ring:
            if now - s.at >= window:
                base = s
            else:
                break
        return base

    def series(self, now: float, window: float, points: int) -> list[Snapshot]:
        """Up to `points` + 1 snapshots spread over the window, oldest first (for trends)."""
        inside = [s for s in self.ring if now - s.at <= window]
        if len(inside) <= points + 1:
            return inside
        stride = (len(inside) - 1) / points
        return [inside[round(i * stride)] for i in range(points + 1)]
