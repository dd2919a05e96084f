"""Knobs of the simulated platform; the defaults give a lively but realistic mix."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields, replace
from typing import Any

_NS = 1_000_000_000
DEFAULT_SLUGS = (
    "web-frontend",
    "match-server",
    "batch-render",
    "edge-proxy",
    "ml-infer",
    "chat-relay",
)


@dataclass(frozen=True)
class LogNormal:
    """Latency distribution given by its median (seconds) and sigma of the underlying normal."""

    median_s: float
    sigma: float

    def sample_ns(self, rng: random.Random, factor: float = 1.0) -> int:
        """One sample in ns, at least 1 µs; capped at 50 medians so one unit cannot stall a run."""
        value = self.median_s * math.exp(min(self.sigma * rng.gauss(0.0, 1.0), math.log(50.0)))
        return max(1_000, int(value * factor * _NS))


@dataclass(frozen=True)
class Workload:
    """A workload as the route lists it."""

    id: str
    slug: str


@dataclass
class SimConfig:
    """Everything that shapes a simulated log; same config and seed give the same log."""

    seed: int = 1
    workloads: int = 3
    slugs: tuple[str, ...] = DEFAULT_SLUGS
    arrival_rate: float = 0.2  # units per second of simulated time, per workload (Poisson)
    scale_rate: float = 1 / 90  # units.scaled events per second, per workload (Poisson)
    start_ns: int = 1_700_000_000 * _NS
    readiness: LogNormal = field(default_factory=lambda: LogNormal(6.0, 0.6))
    allocation_ack: LogNormal = field(default_factory=lambda: LogNormal(0.04, 0.9))
    drain: LogNormal = field(default_factory=lambda: LogNormal(4.0, 0.8))
    lifetime: LogNormal = field(default_factory=lambda: LogNormal(90.0, 0.7))
    allocation_gap: LogNormal = field(default_factory=lambda: LogNormal(15.0, 0.7))
    session: LogNormal = field(default_factory=lambda: LogNormal(6.0, 0.8))
    p_startup_fail: float = 0.05
    p_destroyed_before_ready: float = 0.03
    p_undelivered: float = 0.05
    p_superseded: float = 0.05
    p_abandoned: float = 0.08  # per unit: an allocation is still pending when its life ends
    p_crash_restart: float = 0.08  # per unit
    p_slow: float = 0.03  # per unit: all its latencies x slow_factor
    slow_factor: float = 10.0
    p_skew: float = 0.02  # per measured interval: its end is stamped before its start
    p_unknown_type: float = 0.01  # per event: a `unit.future_thing` follows it
    p_unknown_fields: float = 0.05  # per event: extra envelope/data fields
    p_drain_reason_missing: float = 0.05
    p_drain_reason_unknown: float = 0.03
    p_accepting_toggle: float = 0.1  # per allocation gap: not_accepting then accepting again
    # Scenario knob: workload id -> fields that differ for that workload, e.g. an incident in
    # one workload ({"wl-3": {"p_undelivered": 0.6, "readiness": LogNormal(150.0, 0.2)}}).
    workload_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = {f.name for f in fields(self)} - {"workload_overrides", "seed", "workloads",
                                                 "slugs", "start_ns"}
        for wl, over in self.workload_overrides.items():
            unknown = set(over) - names
            if unknown:
                raise ValueError(f"workload_overrides[{wl}]: not per-workload knobs {unknown}")

    def for_workload(self, workload_id: str) -> SimConfig:
        """This config with the workload's overrides applied (itself when there are none)."""
        over = self.workload_overrides.get(workload_id)
        return replace(self, workload_overrides={}, **over) if over else self

    def workload_list(self) -> list[Workload]:
        """Ids `wl-<n>` from 1, slugs from `slugs` (suffixed when they run out)."""
        out = []
        for n in range(self.workloads):
            slug = self.slugs[n % len(self.slugs)]
            if n >= len(self.slugs):
                slug = f"{slug}-{n // len(self.slugs) + 1}"
            out.append(Workload(f"wl-{n + 1}", slug))
        return out
