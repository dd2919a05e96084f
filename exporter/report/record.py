"""What the report needs beyond the metrics, recorded while the log is applied: each headline
duration with its unit and end time, every anomaly with where it was read, and the event
timelines of the slowest units (kept for the few that qualify, not for every unit)."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from operator import length_hint
from pathlib import Path
from typing import Any

import orjson

from exporter.model.workload import WorkloadLog
from exporter.report.summary import EXPIRE_EVERY
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.workload import WorkloadMetrics
from exporter.sources.files import LogFile, open_log, workload_of
from exporter.wiring.events import Pipeline

SLOWEST = 8  # units kept per workload and measurement (ready, drain)
ANOMALIES_KEPT = 2000  # per workload; the counts stay exact beyond it

Event = tuple[str, str, Any]  # (occurred_at, type, seq)
Tap = Callable[[str, str, str, dict[str, Any], str | None], None]


NOT_JSON = object()  # stands for a line that does not parse (offer_many's `not_json`)


class Cursor:
    """Where the reader is: the file, and the line being offered within the batch of lines
    being applied. `WorkloadLog.offer_many` takes the batch's iterator (`it`), so the line is
    where that iterator stands: worked out only when an anomaly asks for it, it costs the
    batched path nothing per line. (An event that waits behind a gap is applied later, when
    another line is read: its workload's ReportMetrics keeps where it was read, `waiting`.)"""

    __slots__ = ("base", "batch", "file", "it", "linemap")

    def __init__(self) -> None:
        self.file = ""
        self.base = 0  # lines before the batch
        self.batch: list[Any] = []  # the batch's decoded lines, blank lines left out
        self.it: Iterator[Any] = iter(self.batch)  # the iterator offer_many advances
        self.linemap: list[int] | None = None  # batch index -> line in it, when blanks moved it

    def start(self, batch: list[Any]) -> Iterator[Any]:
        """The batch's iterator, to be given to offer_many: the cursor follows it."""
        self.batch = batch
        self.it = it = iter(batch)
        return it

    @property
    def index(self) -> int:
        """The batch index of the line the iterator gave last (-1: none). A list iterator's
        length hint is exactly how many items it has left (0 once exhausted: the last line
        stays the current one, as after a batch)."""
        return len(self.batch) - length_hint(self.it) - 1

    @property
    def obj(self) -> Any:
        """The decoded line being offered (None before the batch's first)."""
        i = self.index
        return self.batch[i] if i >= 0 else None

    @property
    def line(self) -> int:
        """The line of the event being offered (0: none, at the end of input)."""
        i = self.index
        if i < 0:
            return 0
        return self.base + (self.linemap[i] if self.linemap else i + 1)

    @property
    def seq(self) -> Any:
        """The seq of the event being offered, read only when an anomaly needs it."""
        obj = self.obj
        return obj.get("seq") if type(obj) is dict else None

    def end(self, file: str) -> None:
        """No line is being read (end of input): anomalies found now have line 0."""
        self.file, self.batch, self.linemap = file, [], None
        self.it = iter(self.batch)


class Timelines:
    """Events of live units; when a unit ends, it is kept only if it is among the slowest."""

    def __init__(self, cursor: Cursor) -> None:
        self.cursor = cursor
        self.log: Any = None  # the WorkloadLog: its `next` is the seq being applied
        self.live: defaultdict[str, list[Event]] = defaultdict(list)
        self.scores: dict[str, dict[str, int]] = defaultdict(dict)  # measurement -> uid -> ns
        self.heaps: dict[str, list[tuple[int, str]]] = {"ready": [], "drain": []}
        self.kept: dict[str, list[Event]] = {}

    def tap_for(self, log: Any) -> Tap:
        """The WorkloadLog's tap: called for every unit event, so a closure over locals. The
        log's `next` is the seq of the event being applied."""
        self.log = log
        live, finish = self.live, self.finish

        def tap(uid: str, t: str, at: str, data: dict[str, Any], key: str | None) -> None:
            live[uid].append((at, t, log.next))
            if t == "unit.destroyed":
                finish(uid)
        return tap

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


class ReportMetrics(WorkloadMetrics):
    """The metrics, plus (duration, end time, unit) of each headline measurement (the summary's
    samples) and located anomalies."""

    def __init__(self, registry: Registry, workload: str, cursor: Cursor) -> None:
        super().__init__(registry, workload)
        self.cursor = cursor
        self.points: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
        self._samples: tuple[int, dict[str, list[int]]] = (-1, {})
        self.anomalies: list[tuple[str, str, int, Any, str]] = []  # kind, file, line, seq, what
        # seq -> (file, line) of this workload's events left waiting behind a gap: they are
        # applied when a later line (or the end of input) fills or gives up the gap.
        self.waiting: dict[int, tuple[str, int]] = {}
        self.timelines = Timelines(self.cursor)

    def _anomaly(self, kind: str, what: str, seq: Any = None) -> None:
        """Located at the event being read (or `seq`, for gaps)."""
        if len(self.anomalies) < ANOMALIES_KEPT:
            c = self.cursor
            self.anomalies.append((kind, c.file, c.line, c.seq if seq is None else seq, what))

    @property
    def samples(self) -> dict[str, list[int]]:
        """As SummaryMetrics keeps them, for `replay --summary` and the report's numbers."""
        n = sum(map(len, self.points.values()))
        if self._samples[0] != n:
            self._samples = (n, {m: [p[0] for p in pts] for m, pts in self.points.items()})
        return self._samples[1]

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
        """Found when read, or (an invalid event that held its seq) when applied, which may be
        after it waited behind a gap: then located where it was read."""
        super().invalid(reason)
        what = {"json": "not JSON", "range": "a value out of range"}.get(
            reason, "fails the schema")
        where = self._waited()
        if where is None:
            self._anomaly("invalid", what)
        elif len(self.anomalies) < ANOMALIES_KEPT:
            self.anomalies.append(("invalid", *where, self.timelines.log.next, what))

    def gap(self, first: int, last: int) -> None:
        super().gap(first, last)
        self._anomaly("gap", f"{last - first + 1} missing", f"{first}-{last}")

    def skew(self, measurement: str) -> None:
        """Located at the event being applied, which may have waited behind a gap."""
        super().skew(measurement)
        if len(self.anomalies) < ANOMALIES_KEPT:
            where = self._waited() or (self.cursor.file, self.cursor.line)
            self.anomalies.append(("clock skew", *where, self.timelines.log.next,
                                   f"{measurement}: end stamped before start"))

    def _waited(self) -> tuple[str, int] | None:
        """Where the event being applied was read, when it waited behind a gap (None: it is
        the line being read)."""
        return self.waiting.get(self.timelines.log.next) if self.waiting else None

    def forget_applied(self, applied_through: int) -> None:
        """Drop where the events up to this seq waited: they are applied."""
        for s in [s for s in self.waiting if s <= applied_through]:
            del self.waiting[s]


def recording(cursor: Cursor) -> Callable[[Registry, str], ReportMetrics]:
    """The pipeline's observer factory: every workload's ReportMetrics reads one cursor."""
    return lambda registry, workload: ReportMetrics(registry, workload, cursor)


def _chain(first: Tap | None, second: Tap) -> Tap:
    if first is None:
        return second

    def both(uid: str, t: str, at: str, data: dict[str, Any], key: str | None) -> None:
        first(uid, t, at, data, key)
        second(uid, t, at, data, key)
    return both


def _batches(path: LogFile, cursor: Cursor) -> Iterator[list[Any]]:
    """Decoded lines in batches (as sources.files.read_batches), the cursor told where each
    batch starts and, when it held blank lines, where each item sits in it."""
    loads, error = orjson.loads, orjson.JSONDecodeError
    base = 0
    with open_log(path) as f:
        while True:
            lines = f.readlines(8192)
            if not lines:
                return
            batch: list[Any] = []
            append = batch.append
            blank = False
            for line in lines:
                try:
                    append(loads(line))
                except error:
                    if line.isspace():
                        blank = True
                    else:
                        append(NOT_JSON)
            # Where the kept lines sit among all of the batch's, when blank lines moved them.
            linemap = [k + 1 for k, ln in enumerate(lines) if not ln.isspace()] if blank else None
            cursor.base, cursor.linemap = base, linemap
            base += len(lines)
            yield batch


def report_metrics(log: WorkloadLog) -> ReportMetrics:
    """A log's observer, which the report's pipeline makes a ReportMetrics."""
    obs = log.obs
    if not isinstance(obs, ReportMetrics):
        raise TypeError("not a log of the report's pipeline")
    return obs


def _noting_waiting(log: WorkloadLog, cursor: Cursor,
                    waiting: dict[int, tuple[str, int]]) -> Callable[[Any, str], object]:
    """offer_many's `slow`: `offer`, then where an event it left waiting behind a gap was read
    (only offer can leave one waiting: the inline path applies the next seq, nothing waiting).
    The first arrival of a seq is the one that waits; a later one is a duplicate."""
    offer = log.offer

    def offer_noting(obj: Any, source: str) -> object:
        what = offer(obj, source)
        if log.pending:  # rare: did this event stay behind a gap?
            seq = obj.get("seq") if type(obj) is dict else None
            if type(seq) in (int, float) and seq in log.pending and seq not in waiting:
                waiting[seq] = (cursor.file, cursor.line)
        return what
    return offer_noting


def apply_files_recorded(pipeline: Pipeline, files: Iterable[Path | LogFile],
                         workload: str | None, cursor: Cursor) -> None:
    """replay.apply_files (offer_many, batch by batch), the cursor following each batch's
    iterator so that every anomaly is located (blank lines count in line numbers)."""
    for f in files:
        path = f if isinstance(f, LogFile) else LogFile(f, workload_of(f))
        name = workload or path.workload
        log = pipeline.workload(name)
        obs = report_metrics(log)
        if obs.timelines.log is None:
            log.tap = _chain(log.tap, obs.timelines.tap_for(log))
        offer_many, slow = log.offer_many, _noting_waiting(log, cursor, obs.waiting)
        start = cursor.start
        cursor.file = path.short_name
        n = 0
        for batch in _batches(path, cursor):
            offer_many(start(batch), NOT_JSON, "file", slow)
            n += len(batch)
            if n >= EXPIRE_EVERY:
                n = 0
                pipeline.expire_workload(name, log.clock)
                obs.timelines.finish_all(log.units)
                obs.forget_applied(log.applied_through)
    for name, log in pipeline.logs.items():
        cursor.end("(end of input)")  # gaps given up now are located here; skews where read
        log.flush()
        pipeline.expire_workload(name, log.clock)
        report_metrics(log).timelines.finish_all()
