"""Ground truth of what the simulator emitted, in exact integer nanoseconds.

Semantics follow docs/measurements.md; the generator attaches the effects of an interval to the
event that ends it, so the truth only covers events already emitted with complete intervals.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

MEASUREMENTS = ("ready", "allocation_ack", "drain")
DRAIN_REASONS = ("stop", "destroy", "replace", "scale_down")


@dataclass(frozen=True)
class Interval:
    """An interval measurement: `measurement` from start_ns to end_ns (event clock)."""

    measurement: str  # one of MEASUREMENTS
    start_ns: int
    end_ns: int
    reason: str | None = None  # drain reason label (already mapped to `unknown` if needed)


@dataclass(frozen=True)
class Outcome:
    """An outcome counter increment: kind `startup` or `allocation`."""

    kind: str
    outcome: str


Effect = Interval | Outcome


def drain_reason(data: dict[str, Any]) -> str:
    """The drain label: data.reason when it is one of the four known reasons, else `unknown`."""
    reason = data.get("reason")
    return reason if reason in DRAIN_REASONS else "unknown"


@dataclass
class Truth:
    """True values; durations are integer ns. Missing keys read as empty/zero."""

    ready: defaultdict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    startups: Counter[tuple[str, str]] = field(default_factory=Counter)
    allocation_ack: defaultdict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    allocations: Counter[tuple[str, str]] = field(default_factory=Counter)
    drain: defaultdict[tuple[str, str], list[int]] = field(
        default_factory=lambda: defaultdict(list)
    )
    skew: Counter[tuple[str, str]] = field(default_factory=Counter)
    events_by_type: Counter[tuple[str, str]] = field(default_factory=Counter)
    exits: Counter[tuple[str, int, bool]] = field(default_factory=Counter)
    failures: Counter[tuple[str, str]] = field(default_factory=Counter)
    destroyed: Counter[tuple[str, str]] = field(default_factory=Counter)
    desired: dict[str, int] = field(default_factory=dict)
    last_seq: dict[str, int] = field(default_factory=dict)

    def record(self, workload: str, envelope: dict[str, Any], effects: list[Effect]) -> None:
        """Account one emitted envelope and the interval/outcome effects it completes."""
        kind, data = envelope["type"], envelope["data"]
        self.events_by_type[(workload, kind)] += 1
        self.last_seq[workload] = envelope["seq"]
        if kind == "unit.exited":
            self.exits[(workload, data["code"], data["restarted"])] += 1
        elif kind == "unit.failed":
            self.failures[(workload, data["reason"])] += 1
        elif kind == "unit.destroyed":
            self.destroyed[(workload, data["reason"])] += 1
        elif kind == "units.scaled":
            self.desired[workload] = data["to"]
        for effect in effects:
            self._apply(workload, effect)

    def _apply(self, workload: str, effect: Effect) -> None:
        if isinstance(effect, Outcome):
            target = self.startups if effect.kind == "startup" else self.allocations
            target[(workload, effect.outcome)] += 1
            return
        duration = effect.end_ns - effect.start_ns
        if duration < 0:
            self.skew[(workload, effect.measurement)] += 1
        elif effect.measurement == "ready":
            self.ready[workload].append(duration)
        elif effect.measurement == "allocation_ack":
            self.allocation_ack[workload].append(duration)
        else:
            self.drain[(workload, effect.reason or "unknown")].append(duration)
