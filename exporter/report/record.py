"""What the report needs beyond the metrics, recorded while the log is applied: each headline
duration with its unit and end time, every anomaly with where it was read, and the event
timelines of the slowest units (kept for the few that qualify, not for every unit)."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from exporter.pipeline import Pipeline
from exporter.replay import EXPIRE_EVERY, SummaryMetrics
from exporter.sinks.metrics.family import Registry
from exporter.sources.files import NOT_JSON, LogFile, open_log, workload_of

SLOWEST = 8  # units kept per workload and measurement (ready, drain)
ANOMALIES_KEPT = 2000  # per workload; the counts stay exact beyond it

Event = tuple[str, str, Any]  # (occurred_at, type, seq)
Tap = Callable[[str, str, str, dict[str, Any], str | None], None]


class Cursor:
    """Where the reader is (the file, line and seq of the event being offered), and which event
    is being applied: an event that waited behind a gap is applied later, when another line is
    read, so the lines of waiting events are kept (`pending`) until they are applied."""

    __slots__ = ("applied_line", "applied_seq", "file", "line", "pending", "seq")

    def __init__(self) -> None:
        self.file = ""
        self.line = 0
        self.seq: Any = None
        self.pending: dict[int, int] = {}  # seq -> line, of events waiting behind a gap
        self.applied_seq: Any = None
        self.applied_line = 0

    def applying(self, seq: int) -> None:
        self.applied_seq = seq
        self.applied_line = self.pending.pop(seq, self.line) if self.pending else self.line


class Timelines:
    """Events of live units; when a unit ends, it is kept only if it is among the slowest."""

    def __init__(self, cursor: Cursor) -> None:
        self.cursor = cursor
        self.live: dict[str, list[Event]] = {}
        self.scores: dict[str, dict[str, int]] = defaultdict(dict)  # measurement -> uid -> ns
        self.heaps: dict[str, list[tuple[int, str]]] = {"ready": [], "drain": []}
        self.kept: dict[str, list[Event]] = {}

    def tap(self, uid: str, t: str, at: str, data: dict[str, Any], key: str | None) -> None:
        evs = self.live.get(uid)
        if evs is None:
            evs = self.live[uid] = []
        evs.append((at, t, self.cursor.applied_seq))
        if t == "unit.destroyed":
            self.finish(uid)

    def finish(self, uid: str) -> None:
        evs = self.live.pop(uid, None)
        if evs is None:
            return
        for m, heap in self.heaps.items():
            ns = self.scores[m].pop(uid, None)
            if ns is None:
                continue
            if len(heap) < SLOWEST:
                heapq.heappush(heap, (ns, uid))
            elif ns > heap[0][0]:
                _, out = heapq.heapreplace(heap, (ns, uid))
                if not any(out == u for h in self.heaps.values() for _, u in h):
                    self.kept.pop(out, None)
            else:
                continue
            self.kept[uid] = evs

    def finish_all(self, alive: Iterable[str] | None = None) -> None:
        """End of the log (alive None), or an expiry sweep: units no longer alive are done."""
        keep = set(alive) if alive is not None else set()
        for uid in [u for u in self.live if u not in keep]:
            self.finish(uid)

    def slowest(self, m: str) -> list[tuple[int, str]]:
        return sorted(self.heaps[m], reverse=True)


class ReportMetrics(SummaryMetrics):
    """The summary's samples, plus (duration, end time, unit) of each and located anomalies."""

    def __init__(self, registry: Registry, workload: str, cursor: Cursor) -> None:
        super().__init__(registry, workload)
        self.cursor = cursor
        self.points: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
        self.anomalies: list[tuple[str, str, int, Any, str]] = []  # kind, file, line, seq, what
        self.timelines = Timelines(self.cursor)

    def _anomaly(self, kind: str, what: str, seq: Any = None) -> None:
        """Located at the event being read (or `seq`, for gaps)."""
        if len(self.anomalies) < ANOMALIES_KEPT:
            c = self.cursor
            self.anomalies.append((kind, c.file, c.line, c.seq if seq is None else seq, what))

    def applied(self, type_label: str, seq: int) -> None:
        super().applied(type_label, seq)
        self.cursor.applying(seq)

    def ready(self, unit_id: str, ns: int) -> None:
        super().ready(unit_id, ns)
        self.points["ready"].append((ns, self._at(), unit_id))
        self.timelines.scores["ready"][unit_id] = ns

    def allocation(self, unit_id: str, outcome: str, ack_ns: int | None) -> None:
        super().allocation(unit_id, outcome, ack_ns)
        if ack_ns is not None:
            self.points["allocation_ack"].append((ack_ns, self._at(), unit_id))

    def drain(self, unit_id: str, reason: str, ns: int) -> None:
        super().drain(unit_id, reason, ns)
        self.points["drain"].append((ns, self._at(), unit_id))
        self.timelines.scores["drain"][unit_id] = ns

    def duplicate(self, source: str) -> None:
        super().duplicate(source)
        self._anomaly("duplicate", "seq already applied")

    def invalid(self, reason: str) -> None:
        super().invalid(reason)
        self._anomaly("invalid", "not JSON" if reason == "json" else "fails the schema")

    def gap(self, first: int, last: int) -> None:
        super().gap(first, last)
        self._anomaly("gap", f"{last - first + 1} missing", f"{first}-{last}")

    def skew(self, measurement: str) -> None:
        """Located at the event being applied, which may have waited behind a gap."""
        super().skew(measurement)
        if len(self.anomalies) < ANOMALIES_KEPT:
            c = self.cursor
            self.anomalies.append(("clock skew", c.file, c.applied_line, c.applied_seq,
                                   f"{measurement}: end stamped before start"))


def recording(cursor: Cursor) -> Callable[[Registry, str], ReportMetrics]:
    """The pipeline's observer factory: every workload's ReportMetrics reads one cursor."""
    return lambda registry, workload: ReportMetrics(registry, workload, cursor)


def read_numbered(path: Path | LogFile, size: int = 32) -> Iterator[list[tuple[int, Any]]]:
    """Like sources.files.read_batches, with each line's number (blank lines count)."""
    loads = orjson.loads
    error = orjson.JSONDecodeError
    n = 0
    with open_log(path) as f:
        while True:
            lines = f.readlines(size * 256)
            if not lines:
                return
            batch: list[tuple[int, Any]] = []
            for line in lines:
                n += 1
                try:
                    batch.append((n, loads(line)))
                except error:
                    if not line.isspace():
                        batch.append((n, NOT_JSON))
            yield batch


def _chain(first: Tap | None, second: Tap) -> Tap:
    if first is None:
        return second

    def both(uid: str, t: str, at: str, data: dict[str, Any], key: str | None) -> None:
        first(uid, t, at, data, key)
        second(uid, t, at, data, key)
    return both


def apply_files_recorded(pipeline: Pipeline, files: Iterable[Path | LogFile],
                         workload: str | None,
                         cursor: Cursor) -> None:
    """replay.apply_files, telling the cursor where each event was read."""
    for f in files:
        path = f if isinstance(f, LogFile) else LogFile(f, workload_of(f))
        name = workload or path.workload
        log = pipeline.workload(name)
        obs: ReportMetrics = log.obs  # type: ignore[assignment]
        if getattr(log, "_report_tap", None) is None:
            log.tap = _chain(log.tap, obs.timelines.tap)
            log._report_tap = True  # type: ignore[attr-defined]
        offer, reject = log.offer, log.reject_json
        pending = cursor.pending
        cursor.file = path.short_name
        n = 0
        for batch in read_numbered(path):
            for line, obj in batch:
                cursor.line = line
                if obj is NOT_JSON:
                    cursor.seq = None
                    reject()
                else:
                    seq = cursor.seq = obj.get("seq") if type(obj) is dict else None
                    if type(seq) is int and seq > log.next:  # it will wait behind a gap
                        pending[seq] = line
                    offer(obj)
            n += len(batch)
            if n >= EXPIRE_EVERY:
                n = 0
                pipeline.expire_workload(name, log.clock)
                obs.timelines.finish_all(log.units)
    for name, log in pipeline.logs.items():
        cursor.file, cursor.line, cursor.seq = "(end of input)", 0, None
        cursor.pending.clear()  # lines of another file's waiting events are not this one's
        log.flush()
        pipeline.expire_workload(name, log.clock)
        log.obs.timelines.finish_all()  # type: ignore[attr-defined]
