"""UnitSignal state snapshots and observations as metrics.

Only the fields that changed between two snapshots are rendered again, so a status write that
flips `accepting` costs one line, not a dozen.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable

from exporter import catalog
from exporter.model.unitsignals import Key, SignalState
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.series import escape_label_value as esc
from exporter.sinks.metrics.table import TableFamily

# Simple per-object gauges: (metric name, SignalState field).
_PLAIN = (
    ("zaroz_unitsignal_generation_lag", "generation_lag"),
    ("zaroz_unitsignal_ready", "ready"),
    ("zaroz_unitsignal_accepting", "accepting"),
    ("zaroz_unitsignal_allocation_pending", "allocation_pending"),
    ("zaroz_unitsignal_status_seq", "status_seq"),
    ("zaroz_unitsignal_spec_valid", "spec_valid"),
    ("zaroz_unitsignal_status_valid", "status_valid"),
    ("zaroz_unitsignal_generation_stuck_invalid_spec", "stuck_invalid_spec"),
)


@functools.lru_cache(maxsize=256)
def label_name(k8s_label: str) -> str:
    """`label_` + the Kubernetes label name with invalid characters as `_` (kube-state-metrics)."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k8s_label)


# Bounded values: their label text is built once.
_ACTIVITY = {a: f',activity="{a}"}}' for a in ("idle", "busy", "none")}
_REASON = {r: f',reason="{r}"}}' for r in (*catalog.DRAIN_REASONS, "none")}


def _with(block: str, extra: str) -> str:
    return block[:-1] + "," + extra + "}"


class UnitSignalMetrics:
    """Implements model.unitsignals.SignalObserver."""

    def __init__(self, registry: Registry, clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self.clock = clock
        self.phases: dict[str, dict[str, dict[Key, float]]] = {}  # the model's, see attach()
        # (family, index of the SignalState field): plain int values, compared by position.
        self._plain_idx = [(registry.table(n), SignalState._fields.index(f)) for n, f in _PLAIN]
        self._lag_s = registry.table("zaroz_unitsignal_generation_lag_seconds")
        self._info = registry.table("zaroz_unitsignal_info")
        self._labels = registry.table("zaroz_unitsignal_labels")
        self._activity = registry.table("zaroz_unitsignal_activity")
        self._draining = registry.table("zaroz_unitsignal_draining")
        self._tables: list[TableFamily] = [
            f for f in registry.families.values() if isinstance(f, TableFamily)
            and f.metric.name.startswith("zaroz_unitsignal_")
        ]
        self._blocks: dict[Key, str] = {}
        self._observe = registry["zaroz_unitsignal_generation_observe_seconds"]
        self._ready = registry["zaroz_unitsignal_ready_seconds"]
        self._ack = registry["zaroz_unitsignal_allocation_ack_seconds"]
        self._violations = registry["zaroz_unitsignal_conformance_violations_total"]
        self._skew = registry["zaroz_unitsignal_clock_skew_total"]
        self._workloads: set[str] = set()

    def attach(self, phases: dict[str, dict[str, dict[Key, float]]]) -> None:
        """The model's per-workload phase index, read at scrape time for counts and ages."""
        self.phases = phases

    # -- SignalObserver --------------------------------------------------------------------

    def state(self, key: Key, old: SignalState | None, new: SignalState | None) -> None:
        if new is None:
            for table in self._tables:
                table.remove(key)
            self._blocks.pop(key, None)
            return
        if new.workload not in self._workloads:
            self._workload(new.workload)
        fresh = old is None or old.workload != new.workload
        if fresh:
            block = self._blocks[key] = (
                f'{{namespace="{esc(key[0])}",unitsignal="{esc(key[1])}",'
                f'workload="{esc(new.workload)}"}}'
            )
        else:
            block = self._blocks[key]
        if fresh:
            # First sight (most of a sync): every line at once, without per-line calls.
            tail = block + " "
            for table, i in self._plain_idx:
                v = new[i]
                table.lines[key] = f"{table.prefix}{tail}{v}\n".encode()
                table._body = None
        else:
            for table, i in self._plain_idx:
                v = new[i]
                if v != old[i]:  # type: ignore[index]
                    table.set(key, block, v)
        if fresh or new.pending_since != old.pending_since:  # type: ignore[union-attr]
            since = new.pending_since
            if since is None:
                self._lag_s.set(key, block, 0)
            else:
                clock = self.clock
                self._lag_s.set_live(key, block, lambda: max(0.0, clock() - since))
        if fresh or (new.unit_id, new.key, new.agent_version) != (
            old.unit_id, old.key, old.agent_version  # type: ignore[union-attr]
        ):
            self._info.set(key, _with(block, f'unit_id="{esc(new.unit_id)}",key="{esc(new.key)}"'
                                      f',agent_version="{esc(new.agent_version)}"'), 1)
        if new.labels and (fresh or new.labels != old.labels):  # type: ignore[union-attr]
            extra = ",".join(f'{label_name(n)}="{esc(v)}"' for n, v in new.labels)
            self._labels.set(key, _with(block, extra), 1)
        elif not new.labels and not fresh and old.labels:  # type: ignore[union-attr]
            self._labels.remove(key)
        if fresh or new.activity != old.activity:  # type: ignore[union-attr]
            self._activity.set(key, block[:-1] + _ACTIVITY[new.activity], 1)
        if fresh or new.draining != old.draining:  # type: ignore[union-attr]
            self._draining.set(key, block[:-1] + _REASON[new.draining],
                               0 if new.draining == "none" else 1)

    def generation_observed(self, workload: str, seconds: float) -> None:
        self._observe.labels(workload).observe(seconds)  # type: ignore[union-attr]

    def ready(self, workload: str, seconds: float) -> None:
        self._ready.labels(workload).observe(seconds)  # type: ignore[union-attr]

    def allocation_ack(self, workload: str, seconds: float) -> None:
        self._ack.labels(workload).observe(seconds)  # type: ignore[union-attr]

    def violation(self, workload: str, rule: str) -> None:
        self._violations.labels(workload, rule).inc()

    def skew(self, workload: str, measurement: str) -> None:
        self._skew.labels(workload, measurement).inc()

    # -- per workload ----------------------------------------------------------------------

    def _workload(self, workload: str) -> None:
        self._workloads.add(workload)
        r = self.registry
        for rule in catalog.VIOLATION_RULES:
            self._violations.labels(workload, rule)
        for phase in catalog.PHASES:
            r["zaroz_workload_unitsignals"].callback(
                (workload, phase), lambda w=workload, p=phase: len(self._members(w, p))
            )
            r["zaroz_workload_unitsignal_oldest_phase_seconds"].callback(
                (workload, phase), lambda w=workload, p=phase: self._oldest(w, p)
            )

    def _members(self, workload: str, phase: str) -> dict[Key, float]:
        return self.phases.get(workload, {}).get(phase, {})

    def _oldest(self, workload: str, phase: str) -> float:
        members = self._members(workload, phase)
        return max(0.0, self.clock() - min(members.values())) if members else 0.0
