"""The fault schedule: a list of (time, fault, target, duration) drawn from one seed, so the
same seed replays the same run."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    SIGKILL = "sigkill"  # the exporter killed, restarted on its state dir after `duration`
    SIGTERM = "sigterm"  # the exporter stopped, restarted after `duration`
    ROUTE_503 = "route_503"  # the route answers 503 (Retry-After 0..1) for `duration`
    ROUTE_DROP = "route_drop"  # connections closed without an answer
    ROUTE_TRUNCATE = "route_truncate"  # a body cut short of its Content-Length
    ROUTE_SLOW = "route_slow"  # slow pages, trickled bodies
    ROUTE_410_EDGE = "route_410_edge"  # 410 whose oldest_seq is the cursor's next: nothing lost
    # Retention expired a range of a workload's log (`target` picks it, `duration` sets its
    # length) before any reader had it: its events are never served again by the route nor by
    # webhooks, a cursor in it gets 410 with the oldest seq past it (platform.holes).
    ROUTE_410_LOSS = "route_410_loss"
    DISK_FULL = "disk_full"  # the exporter's state disk filled, freed after `duration`
    DISK_FULL_KILL = "disk_full_kill"  # the disk filled, the exporter killed and started on it
    RESHARD = "reshard"  # every exporter restarted with another shard count (`target`)
    OTLP_REFUSE = "otlp_refuse"  # the collector answers 503
    OTLP_SLOW = "otlp_slow"  # the collector takes a second a request
    OTLP_ABSENT = "otlp_absent"  # the collector's port closed
    WEBHOOK_REORDER = "webhook_reorder"  # deliveries shuffled in windows of 8
    WEBHOOK_RETRY = "webhook_retry"  # a fifth of deliveries sent again (the first answer lost)
    WEBHOOK_REPLAY = "webhook_replay"  # up to 50 delivered events delivered again
    WEBHOOK_ROTATE = "webhook_rotate"  # the signing secret rotated
    KUBE_CRD = "kube_crd"  # the UnitSignal CRD deleted (its objects with it), re-created after
    KUBE_DOWN_CHANGES = "kube_down_changes"  # UnitSignals changed while an exporter is killed
    KUBE_WATCH_410 = "kube_watch_410"  # the exporters' next watches 410 Gone: a relist


EXPORTER_KINDS = (Kind.SIGKILL, Kind.SIGTERM, Kind.DISK_FULL, Kind.DISK_FULL_KILL)
OTLP_KINDS = (Kind.OTLP_REFUSE, Kind.OTLP_SLOW, Kind.OTLP_ABSENT)
WEBHOOK_KINDS = (Kind.WEBHOOK_REORDER, Kind.WEBHOOK_RETRY, Kind.WEBHOOK_REPLAY)
ROUTE_KINDS = (Kind.ROUTE_503, Kind.ROUTE_DROP, Kind.ROUTE_TRUNCATE, Kind.ROUTE_SLOW,
               Kind.ROUTE_410_EDGE)  # fmt: skip
# Relative weights: kills most often, a reshard now and then.
WEIGHTS = {Kind.SIGKILL: 6, Kind.SIGTERM: 3, Kind.ROUTE_503: 3, Kind.ROUTE_DROP: 2,
           Kind.ROUTE_TRUNCATE: 2, Kind.ROUTE_SLOW: 2, Kind.ROUTE_410_EDGE: 2,
           Kind.DISK_FULL: 2, Kind.RESHARD: 1, Kind.OTLP_REFUSE: 1, Kind.OTLP_SLOW: 1,
           Kind.OTLP_ABSENT: 1, Kind.WEBHOOK_REORDER: 1, Kind.WEBHOOK_RETRY: 1,
           Kind.WEBHOOK_REPLAY: 1, Kind.WEBHOOK_ROTATE: 1, Kind.DISK_FULL_KILL: 1}  # fmt: skip
KUBE_KINDS = (Kind.KUBE_CRD, Kind.KUBE_DOWN_CHANGES, Kind.KUBE_WATCH_410)
# The cluster's faults, drawn from a stream of their own (a tenth of the rate), so a seed's other
# faults are the schedule they were before the cluster's were added.
KUBE_WEIGHTS = {Kind.KUBE_CRD: 1, Kind.KUBE_DOWN_CHANGES: 2, Kind.KUBE_WATCH_410: 2}
# Ranges lost for good, from a stream of their own too (a twentieth of the rate).
LOSS_WEIGHTS = {Kind.ROUTE_410_LOSS: 1}


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: Kind
    target: int  # an exporter's slot (modulo the exporters alive), the shard count, a workload
    duration_s: float

    def __str__(self) -> str:
        return (f"t={self.at_s:7.2f}s {self.kind:<15} target={self.target} "
                f"for {self.duration_s:.2f}s")


def draw(seed: int, seconds: float, exporters: int, *, rate: float = 0.5,
         kinds: frozenset[Kind] | None = None, max_shards: int = 3) -> list[Fault]:
    """Faults at Poisson times (`rate` a second) over the first 85% of the run, each lasting
    0.2-6 s, so several overlap; the last 15% is left for the faults to end."""
    out = _draw(random.Random(seed), WEIGHTS, seconds, exporters, rate, kinds, max_shards)
    out += _draw(random.Random(seed ^ 0xC1), KUBE_WEIGHTS, seconds, exporters, rate / 10, kinds,
                 max_shards)
    out += _draw(random.Random(seed ^ 0x410), LOSS_WEIGHTS, seconds, exporters, rate / 20,
                 kinds, max_shards)
    return sorted(out, key=lambda f: f.at_s)


def _draw(rng: random.Random, table: dict[Kind, int], seconds: float, exporters: int,
          rate: float, kinds: frozenset[Kind] | None, max_shards: int) -> list[Fault]:
    allowed = [k for k in table if kinds is None or k in kinds]
    weights = [table[k] for k in allowed]
    out: list[Fault] = []
    t = rng.expovariate(rate)
    while t < seconds * 0.85 and allowed:
        kind = rng.choices(allowed, weights)[0]
        if kind is Kind.RESHARD:
            target = rng.randint(1, max(max_shards, exporters))
        elif kind is Kind.ROUTE_410_LOSS:
            target = rng.randrange(1 << 16)  # a workload, modulo the run's
        else:
            target = rng.randrange(max(max_shards, exporters))
        duration = rng.uniform(0.0, 1.0) if kind is Kind.RESHARD else rng.uniform(0.2, 6.0)
        out.append(Fault(round(t, 2), kind, target, round(duration, 2)))
        t += rng.expovariate(rate)
    return out


def around(schedule: list[Fault], at_s: float, window_s: float = 20.0) -> list[Fault]:
    """The faults that were active or began within `window_s` before `at_s`."""
    return [f for f in schedule
            if f.at_s <= at_s and f.at_s + f.duration_s >= at_s - window_s]  # fmt: skip


def by_kind(faults: list[Fault]) -> Counter[str]:
    return Counter(str(f.kind) for f in faults)
