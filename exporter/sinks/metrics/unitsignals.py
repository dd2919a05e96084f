"""UnitSignal state snapshots and observations as metrics.

A state change stores the new snapshot in its row and marks the row's chunk dirty; the lines
are rendered at the next scrape (see table.py), so a watch event costs no formatting at all.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Sequence

from exporter import vocabulary
from exporter.model.unitsignals import Key, SignalState
from exporter.sinks.metrics import protobuf as pb
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.series import escape_label_value as esc
from exporter.sinks.metrics.series import format_value
from exporter.sinks.metrics.table import Column, Row, RowTable

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


@functools.lru_cache(maxsize=4096)
def _labels_text(labels: tuple[tuple[str, str], ...]) -> str:
    """The allowlisted labels as label text; few distinct sets (a team, a tier), so cached."""
    return ",".join([f'{label_name(n)}="{esc(v)}"' for n, v in labels])


# A rendered row's label block is left open, `{a="x",b="y"`, so a column appends its own
# labels (made per chunk by _blocks, not kept).
# Field positions in SignalState, read by index (faster than NamedTuple attributes).
_F = {name: i for i, name in enumerate(SignalState._fields)}
_UNIT_ID, _KEY, _AGENT, _LABELS = _F["unit_id"], _F["key"], _F["agent_version"], _F["labels"]
_ACT, _DRAIN, _SINCE = _F["activity"], _F["draining"], _F["pending_since"]

# Bounded values: their label text is built once.
_ACTIVITY = {a: f',activity="{a}"}} 1\n' for a in vocabulary.ACTIVITIES}
_REASON = {r: f',reason="{r}"}} {0 if r == "none" else 1}\n'
           for r in (*vocabulary.DRAIN_REASONS, "none")}


def _plain(prefix: str, i: int) -> Callable[[Sequence[Row]], str]:
    return lambda rows: "".join([f"{prefix}{b}}} {s[i]}\n" for b, s in rows])


def _info(prefix: str) -> Callable[[Sequence[Row]], str]:
    def render(rows: Sequence[Row]) -> str:
        text = "".join([f'{prefix}{b},unit_id="{s[_UNIT_ID]}",key="{s[_KEY]}",'
                        f'agent_version="{s[_AGENT]}"}} 1\n' for b, s in rows])
        # Nearly never is there anything to escape: check the whole chunk at once (six quoted
        # values a line, no backslash, a newline only at the end of each line).
        n = len(rows)
        if text.count('"') == 12 * n and "\\" not in text and text.count("\n") == n:
            return text
        return "".join([f'{prefix}{b},unit_id="{esc(s[_UNIT_ID])}",key="{esc(s[_KEY])}",'
                        f'agent_version="{esc(s[_AGENT])}"}} 1\n' for b, s in rows])
    return render


def _labels(prefix: str) -> Callable[[Sequence[Row]], str]:
    return lambda rows: "".join([f"{prefix}{b},{_labels_text(s[_LABELS])}}} 1\n"
                                 for b, s in rows if s[_LABELS]])


def _activity(prefix: str) -> Callable[[Sequence[Row]], str]:
    return lambda rows: "".join([f"{prefix}{b}{_ACTIVITY[s[_ACT]]}" for b, s in rows])


def _draining(prefix: str) -> Callable[[Sequence[Row]], str]:
    return lambda rows: "".join([f"{prefix}{b}{_REASON[s[_DRAIN]]}" for b, s in rows])


def _lag_seconds(prefix: str, clock: Callable[[], float]) -> Callable[[Sequence[Row]], str]:
    def render(rows: Sequence[Row]) -> str:
        now = clock()
        return "".join([
            f"{prefix}{b}}} 0\n" if s[_SINCE] is None
            else f"{prefix}{b}}} {format_value(max(0.0, now - s[_SINCE]))}\n"
            for b, s in rows
        ])
    return render


# -- the same columns as protobuf Metric fields: a row's labels (encoded once per row by the table)
# plus its column's own labels and value, with no text in between (table.Column.pb).

_ACTIVITY_PB = {a: pb.label_pairs(("activity",), (a,)) + pb.GAUGE_ONE
                for a in vocabulary.ACTIVITIES}
_REASON_PB = {r: pb.label_pairs(("reason",), (r,)) + pb.gauge_int(0 if r == "none" else 1)
              for r in (*vocabulary.DRAIN_REASONS, "none")}
_INFO_NAMES = ("unit_id", "key", "agent_version")
PbRender = Callable[[Sequence[Row], Sequence[bytes]], bytes]


@functools.lru_cache(maxsize=4096)
def _labels_pb(labels: tuple[tuple[str, str], ...]) -> bytes:
    return pb.label_pairs(tuple(label_name(n) for n, _ in labels),
                          tuple(v for _, v in labels)) + pb.GAUGE_ONE


def _plain_pb(i: int) -> PbRender:
    def render(rows: Sequence[Row], labels: Sequence[bytes]) -> bytes:
        g = pb.gauge_int
        return pb.metric_fields([lab + g(s[i]) for lab, (_, s) in zip(labels, rows, strict=True)])
    return render


def _info_pb(rows: Sequence[Row], labels: Sequence[bytes]) -> bytes:
    lp, one = pb.label_pairs, pb.GAUGE_ONE
    return pb.metric_fields([lab + lp(_INFO_NAMES, (s[_UNIT_ID], s[_KEY], s[_AGENT])) + one
                             for lab, (_, s) in zip(labels, rows, strict=True)])


def _labels_col_pb(rows: Sequence[Row], labels: Sequence[bytes]) -> bytes:
    return pb.metric_fields([lab + _labels_pb(s[_LABELS])
                             for lab, (_, s) in zip(labels, rows, strict=True) if s[_LABELS]])


def _activity_pb(rows: Sequence[Row], labels: Sequence[bytes]) -> bytes:
    return pb.metric_fields([lab + _ACTIVITY_PB[s[_ACT]]
                             for lab, (_, s) in zip(labels, rows, strict=True)])


def _draining_pb(rows: Sequence[Row], labels: Sequence[bytes]) -> bytes:
    return pb.metric_fields([lab + _REASON_PB[s[_DRAIN]]
                             for lab, (_, s) in zip(labels, rows, strict=True)])


def _lag_seconds_pb(clock: Callable[[], float]) -> PbRender:
    zero = pb.gauge_int(0)

    def render(rows: Sequence[Row], labels: Sequence[bytes]) -> bytes:
        now, g = clock(), pb.gauge_value
        return pb.metric_fields([
            lab + (zero if s[_SINCE] is None else g(max(0.0, now - s[_SINCE])))
            for lab, (_, s) in zip(labels, rows, strict=True)
        ])
    return render


def _blocks(keys: Sequence[Key], states: Sequence[SignalState]) -> list[str]:
    """The label blocks of a chunk's rows, left open for each column's own labels; checked
    for characters to escape once for the chunk (names and label values the API server
    accepts never have any)."""
    blocks = [f'{{namespace="{k[0]}",unitsignal="{k[1]}",workload="{s[0]}"'
              for k, s in zip(keys, states, strict=True)]
    joined = "".join(blocks)
    if joined.count('"') != 6 * len(blocks) or "\\" in joined or "\n" in joined:
        blocks = [f'{{namespace="{esc(k[0])}",unitsignal="{esc(k[1])}",workload="{esc(s[0])}"'
                  for k, s in zip(keys, states, strict=True)]
    return blocks


_ROW_LABELS = ("namespace", "unitsignal", "workload")


def _pb_labels(keys: Sequence[Key], states: Sequence[SignalState]) -> list[bytes]:
    """A chunk's row labels as protobuf LabelPair fields (`_blocks`, encoded)."""
    lp = pb.label_pairs
    return [lp(_ROW_LABELS, (k[0], k[1], s[0])) for k, s in zip(keys, states, strict=True)]


class UnitSignalMetrics:
    """Implements model.unitsignals.SignalObserver."""

    def __init__(self, registry: Registry, clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self.clock = clock
        self.phases: dict[str, dict[str, dict[Key, float]]] = {}  # the model's, see attach()
        columns = [
            Column(f := registry.table(name), _plain(f.prefix, i := SignalState._fields.index(
                field)), pb=_plain_pb(i))
            for name, field in _PLAIN
        ]
        t = registry.table
        columns += [
            Column(f := t("zaroz_unitsignal_generation_lag_seconds"),
                   _lag_seconds(f.prefix, clock), live=lambda r: r[1][_SINCE] is not None,
                   pb=_lag_seconds_pb(clock)),
            Column(f := t("zaroz_unitsignal_info"), _info(f.prefix), pb=_info_pb),
            Column(f := t("zaroz_unitsignal_labels"), _labels(f.prefix),
                   count=lambda rows: sum(1 for _, s in rows if s[_LABELS]), pb=_labels_col_pb),
            Column(f := t("zaroz_unitsignal_activity"), _activity(f.prefix), pb=_activity_pb),
            Column(f := t("zaroz_unitsignal_draining"), _draining(f.prefix), pb=_draining_pb),
        ]
        # Families not exported get no column: never rendered. With none left, no rows at all.
        columns = [c for c in columns if registry.exported(c.family.metric.name)]
        self.rows: RowTable | None = RowTable(columns, _blocks, _pb_labels) if columns else None
        self._observe = registry.histogram("zaroz_unitsignal_generation_observe_seconds")
        self._ready = registry.histogram("zaroz_unitsignal_ready_seconds")
        self._ack = registry.histogram("zaroz_unitsignal_allocation_ack_seconds")
        self._violations = registry.counter("zaroz_unitsignal_conformance_violations_total")
        self._skew = registry.counter("zaroz_unitsignal_clock_skew_total")
        self._workloads: set[str] = set()

    def attach(self, phases: dict[str, dict[str, dict[Key, float]]]) -> None:
        """The model's per-workload phase index, read at scrape time for counts and ages."""
        self.phases = phases

    # -- SignalObserver --------------------------------------------------------------------

    def state(self, key: Key, old: SignalState | None, new: SignalState | None) -> None:
        if self.rows is None:  # no per-object family exported
            if new is not None and new.workload not in self._workloads:
                self._workload(new.workload)
            return
        if new is None:
            self.rows.remove(key)
            return
        if old is not None and old.workload == new.workload:
            self.rows.update(key, new)
            return
        if new.workload not in self._workloads:
            self._workload(new.workload)
        self.rows.put(key, new)

    def generation_observed(self, workload: str, seconds: float) -> None:
        self._observe.labels(workload).observe(seconds)

    def ready(self, workload: str, seconds: float) -> None:
        self._ready.labels(workload).observe(seconds)

    def allocation_ack(self, workload: str, seconds: float) -> None:
        self._ack.labels(workload).observe(seconds)

    def violation(self, workload: str, rule: str) -> None:
        self._violations.labels(workload, rule).inc()

    def skew(self, workload: str, measurement: str) -> None:
        self._skew.labels(workload, measurement).inc()

    # -- per workload ----------------------------------------------------------------------

    def _workload(self, workload: str) -> None:
        self._workloads.add(workload)
        r = self.registry
        for rule in vocabulary.VIOLATION_RULES:
            self._violations.labels(workload, rule)
        for phase in vocabulary.PHASES:
            r.gauge("zaroz_workload_unitsignals").callback(
                (workload, phase), functools.partial(self._count, workload, phase)
            )
            r.gauge("zaroz_workload_unitsignal_oldest_phase_seconds").callback(
                (workload, phase), functools.partial(self._oldest, workload, phase)
            )

    def _members(self, workload: str, phase: str) -> dict[Key, float]:
        return self.phases.get(workload, {}).get(phase, {})

    def _count(self, workload: str, phase: str) -> int:
        return len(self._members(workload, phase))

    def _oldest(self, workload: str, phase: str) -> float:
        members = self._members(workload, phase)
        return max(0.0, self.clock() - min(members.values())) if members else 0.0
