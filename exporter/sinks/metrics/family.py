"""Metric families and the registry built from the catalog.

One family class per metric kind, as in prometheus_client: `labels` on a `CounterFamily` gives a
`CounterSeries`, on a `HistogramFamily` a `HistogramSeries`, so a caller's type says which
methods it may call. The registry hands them out by kind (`Registry.counter`, `.gauge`,
`.histogram`), checking the catalog's kind at wiring time. Rendering is shared (`Family`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Generic, Protocol, TypeVar, cast

from exporter import catalog
from exporter.catalog import Kind, Metric
from exporter.sinks.metrics import protobuf
from exporter.sinks.metrics.native import DEFAULT_NATIVE, NativeConfig
from exporter.sinks.metrics.series import (
    CallbackSeries,
    CounterCallback,
    CounterSeries,
    GaugeCallback,
    GaugeSeries,
    HistogramSeries,
    Series,
)
from exporter.sinks.metrics.table import TableFamily

# Families computed from the event log: held back for a workload still catching up on a log it
# has no checkpoint for (see Registry.hold).
HELD_GROUPS = frozenset({"lifecycle", "events"})
PROCESS = "process"  # the render_seconds group of the extras (the process_* and python_* families)


class Held:
    """Workloads whose event-log series are left out of the exposition for now."""

    __slots__ = ("names", "version")

    def __init__(self) -> None:
        self.names: frozenset[str] = frozenset()
        self.version = 0


class Watch:
    """The series of a family changed (or removed) since its reader last looked: what the
    overview reads instead of every series. Each render hands over the series it rendered;
    those still waiting for a render are the family's `dirty`. Overflowing (nobody looked
    for longer than the family has series) it only says so, and the reader reads it all."""

    __slots__ = ("overflow", "series")

    def __init__(self) -> None:
        self.series: list[Series | HistogramSeries] = []
        self.overflow = False


S = TypeVar("S", bound=Series | HistogramSeries)
C = TypeVar("C", bound=CallbackSeries)


class Family(Generic[S]):
    """The series of one metric, by label values; renders only what changed (see series.py)."""

    series_class: type[S]  # what `labels` makes: each kind's family sets it

    __slots__ = (
        "_body", "_held_version", "_om_body", "_pb_body", "_pb_changed", "_pb_held_version",
        "_pb_late", "_pb_lines", "_pb_next", "_pb_parts", "_pb_todo", "bounds_ns", "changed",
        "dirty", "held", "live", "metric", "native", "series", "watches", "wl_index",
    )

    def __init__(self, metric: Metric, held: Held | None = None,
                 native: NativeConfig | None = None) -> None:
        self.metric = metric
        gated = metric.group in HELD_GROUPS and "workload" in metric.labels
        self.held = held if gated else None
        self.wl_index = metric.labels.index("workload") if gated else -1
        self._held_version = self._pb_held_version = 0
        # Histograms only: native buckets beside the classic ones (None: classic only).
        self.native = native if metric.kind is Kind.HISTOGRAM else None
        self.series: dict[tuple[str, ...], S] = {}
        self.dirty: list[Series | HistogramSeries] = []
        self.live: list[CallbackSeries] = []
        self.watches: list[Watch] = []
        # Series changed or removed since the checkpoint last stored them (None: this family
        # is not checkpointed); the state layer fills it on (sinks.metrics.state.track).
        self.changed: list[Series | HistogramSeries] | None = None
        self.bounds_ns = tuple(round(b * 1e9) for b in metric.buckets)
        self._body: bytes | None = b""
        self._om_body: bytes | None = b""
        # The protobuf form, once scraped: each series' encoded Metric (in series order) and the
        # series re-rendered since (by either format's scrape), to encode again.
        self._pb_body: bytes | None = b""
        self._pb_parts: dict[Series | HistogramSeries, bytes] | None = None
        self._pb_changed: list[Series | HistogramSeries] = []
        # While the first protobuf form is built ahead (`pb_prime`): the series there were when
        # it began (encoded in order up to `_pb_next`), and those created since
        self._pb_todo: list[Series | HistogramSeries] | None = None
        self._pb_next = 0
        self._pb_late: list[Series | HistogramSeries] = []
        self._pb_lines = -1  # text lines priming may still render before it encodes (-1: unset)

    def _shown(self) -> Iterable[S]:
        held = self.held
        if held is None or not held.names:
            return self.series.values()
        i, names = self.wl_index, held.names
        return [s for k, s in self.series.items() if k[i] not in names]

    def labels(self, *values: str) -> S:
        s = self.series.get(values)
        if s is None:
            if len(values) != len(self.metric.labels):
                raise ValueError(f"{self.metric.name} takes labels {self.metric.labels}")
            s = self.series[values] = self.series_class(self, values)
            if self._pb_todo is not None:
                self._pb_late.append(s)
        return s

    def _callback(self, values: tuple[str, ...], kind: type[C], fn: Callable[[], float]) -> C:
        """A series of `kind` whose value `fn` gives at each scrape, in place of any series of
        these label values."""
        self.remove(*values)
        s = kind(self, values, fn)
        self.series[values] = cast(S, s)
        if self._pb_todo is not None:
            self._pb_late.append(s)
        return s

    def watch(self) -> Watch:
        """Changes from now on (see Watch)."""
        w = Watch()
        self.watches.append(w)
        return w

    def _rendered(self, batch: list[Series | HistogramSeries]) -> None:
        """Series taken off `dirty`, for the watches."""
        for w in self.watches:
            if not w.overflow:
                w.series += batch
                if len(w.series) > len(self.series) + 64:
                    w.series.clear()
                    w.overflow = True

    def remove(self, *values: str) -> None:
        s = self.series.pop(values, None)
        if s is not None:
            if self.changed is not None:  # its row goes at the next checkpoint
                self.changed.append(s)
            if self.watches:
                self._rendered([s])
            self._body = self._pb_body = None
            if self._pb_parts is not None:
                self._pb_parts.pop(s, None)
            if isinstance(s, CallbackSeries):
                self.live.remove(s)

    def _refresh(self) -> None:
        """Render the lines of what changed since the last call (any format's)."""
        tracked = self._pb_parts is not None
        for c in self.live:
            old = c.line
            if c.render() != old:
                self._body = self._pb_body = None
                if tracked:
                    self._pb_changed.append(c)
        if self.dirty:
            for s in self.dirty:
                if s.line is None:
                    s.render()
            if tracked:
                self._pb_changed += self.dirty
            if self.watches:
                self._rendered(self.dirty)
            self.dirty.clear()
            self._body = self._pb_body = None
        # No protobuf scrape for long (callback series count too): drop the protobuf form
        # rather than let its change list grow with every text scrape.
        if tracked and len(self._pb_changed) > len(self.series):
            self._pb_parts = self._pb_todo = None
            self._pb_changed.clear()
            self._pb_late.clear()

    def prime(self, budget: int) -> int:
        """Render the text lines of up to `budget` series changed since the last render (ahead
        of a scrape, in slices, so the loop stays free); returns how many are left. What the
        scrape's render then has to do is what changed meanwhile."""
        dirty = self.dirty
        if not dirty:
            return 0
        n = min(budget, len(dirty))
        batch = dirty[len(dirty) - n:]
        del dirty[len(dirty) - n:]
        for s in batch:
            if s.line is None:
                s.render()
        if self._pb_parts is not None:
            self._pb_changed += batch
        if self.watches:
            self._rendered(batch)
        self._body = self._pb_body = None
        return len(dirty)

    def pb_prime(self, budget: int) -> int:
        """Do up to `budget` series' worth of the first protobuf scrape's work ahead of it (in
        slices, so the loop stays free); returns the work left (0: none).

        First the text lines of series changed since the last render (the change token both
        forms share), then each series' encoded Metric, in series order. Changes made meanwhile
        are tracked as after a protobuf scrape, and `pb_body` encodes those again."""
        if self._pb_parts is None:
            dirty = self.dirty
            if self._pb_lines < 0:
                self._pb_lines = len(dirty)  # no more than were there: changes go on meanwhile
            if dirty and self._pb_lines > 0:
                n = min(budget, len(dirty), self._pb_lines)
                batch = dirty[len(dirty) - n:]
                del dirty[len(dirty) - n:]
                for s in batch:
                    if s.line is None:
                        s.render()
                if self.watches:
                    self._rendered(batch)
                self._body = None
                self._pb_lines -= n
                return len(self.series) + self._pb_lines
            self._pb_lines = -1
            self._pb_parts, self._pb_body = {}, None
            self._pb_todo, self._pb_next = list(self.series.values()), 0
            self._pb_late.clear()
        todo = self._pb_todo
        if todo is None:
            return 0
        i, end = self._pb_next, min(len(todo), self._pb_next + budget)
        parts, series, encode, m = self._pb_parts, self.series, protobuf.series_metric, \
            self.metric
        for s in todo[i:end]:
            if series.get(s.values) is s:
                parts[s] = encode(m, s.values, s)
        self._pb_next = end
        return len(todo) - end

    def pb_body(self) -> bytes:
        """The family's protobuf `Metric` fields; encodes only the series that changed since
        the last protobuf scrape (or were not primed yet)."""
        self._refresh()
        encode, m, parts = protobuf.series_metric, self.metric, self._pb_parts
        todo = self._pb_todo
        if parts is None:
            parts = self._pb_parts = {s: encode(m, s.values, s) for s in self.series.values()}
            self._pb_body, self._pb_lines = None, -1
        elif self._pb_changed:
            series = self.series
            for s in self._pb_changed:
                if series.get(s.values) is s and (todo is None or s in parts):  # not removed
                    old = parts.get(s)
                    parts[s] = protobuf.rescale(old, s.value) \
                        if old is not None and isinstance(s, Series) else encode(m, s.values, s)
        self._pb_changed.clear()
        if todo is not None:  # primed: what priming had not reached yet, in series order
            series = self.series
            for s in itertools.chain(todo[self._pb_next:], self._pb_late):
                if series.get(s.values) is s:
                    parts[s] = encode(m, s.values, s)
            self._pb_todo, self._pb_body = None, None
            self._pb_late.clear()
        held = self.held
        if held is not None and held.version != self._pb_held_version:
            self._pb_held_version = held.version
            self._pb_body = None
        if self._pb_body is None:
            if held is None or not held.names:
                self._pb_body = b"".join(parts.values())
            else:  # workloads held back (Registry.hold), as in the text body
                self._pb_body = b"".join([parts[s] for s in self._shown()])
        return self._pb_body

    def body(self, openmetrics: bool = False) -> bytes:
        """The family's samples; renders only what changed since the last call.

        OpenMetrics differs only where a histogram series has exemplars (`om_line`); the
        OpenMetrics body is joined from the same renders, and is the text body when none has.
        """
        self._refresh()
        held = self.held
        if held is not None and held.version != self._held_version:
            self._held_version = held.version
            self._body = None
        body = self._body
        if body is None:
            # _refresh rendered every series whose line was cleared: no line is None here.
            body = self._body = b"".join(cast(list[bytes], [s.line for s in self._shown()]))
            self._om_body = None
        if not openmetrics:
            return body
        om_body = self._om_body
        if om_body is None:
            shown = list(self._shown())
            if any(s.om_line for s in shown):
                om_body = b"".join(cast(list[bytes], [s.om_line or s.line for s in shown]))
            else:
                om_body = body
            self._om_body = om_body
        return om_body


class CounterFamily(Family[CounterSeries]):
    __slots__ = ()
    series_class = CounterSeries

    def callback(self, values: tuple[str, ...], fn: Callable[[], float]) -> CounterCallback:
        """A series whose value `fn` gives at each scrape (a count kept elsewhere)."""
        return self._callback(values, CounterCallback, fn)


class GaugeFamily(Family[GaugeSeries]):
    """Gauges, and info metrics (exposed as gauges set to 1)."""

    __slots__ = ()
    series_class = GaugeSeries

    def callback(self, values: tuple[str, ...], fn: Callable[[], float]) -> GaugeCallback:
        """A series whose value `fn` gives at each scrape."""
        return self._callback(values, GaugeCallback, fn)


class HistogramFamily(Family[HistogramSeries]):
    __slots__ = ()
    series_class = HistogramSeries


AnyFamily = CounterFamily | GaugeFamily | HistogramFamily
_CLASSES: dict[Kind, type[AnyFamily]] = {
    Kind.COUNTER: CounterFamily, Kind.GAUGE: GaugeFamily, Kind.INFO: GaugeFamily,
    Kind.HISTOGRAM: HistogramFamily,
}
F = TypeVar("F", CounterFamily, GaugeFamily, HistogramFamily, TableFamily)


class Extra(Protocol):
    """Families from outside the catalog (the standard process metrics), rendered after it."""

    series: int  # samples in the last render

    def render(self, openmetrics: bool) -> bytes: ...


class Registry:
    """All families of the catalog, in catalog order, then the extras."""

    def __init__(self, metrics: Iterable[Metric] = catalog.METRICS,
                 native: NativeConfig | None = DEFAULT_NATIVE) -> None:
        """`native`: the histograms' native buckets (None: classic buckets only)."""
        self.held = Held()
        self.families: dict[str, AnyFamily | TableFamily] = {
            m.name: TableFamily(m) if m.per_object else _CLASSES[m.kind](m, self.held, native)
            for m in metrics
        }
        self.extras: list[Extra] = []
        self.hidden: frozenset[str] = frozenset()  # families not exported (families.py)
        self.render_seconds: dict[str, float] = {}  # by group, of the last render (exposition)
        self._visible: list[AnyFamily | TableFamily] | None = None

    def select(self, included: Callable[[str], bool]) -> None:
        """Export only the families `included` accepts (call before anything is recorded)."""
        self.hidden = frozenset(n for n in self.families if not included(n))
        self._visible = None

    def exported(self, name: str) -> bool:
        return name not in self.hidden

    def visible(self) -> list[AnyFamily | TableFamily]:
        """The exported families, in catalog order."""
        if self._visible is None:
            self._visible = [f for n, f in self.families.items() if n not in self.hidden]
        return self._visible

    def rendered(self, body: Callable[[AnyFamily], bytes],
                 pieces: Callable[[TableFamily], list[bytes]],
                 extra: Callable[[Extra], bytes]) -> Iterator[tuple[Metric | None, list[bytes]]]:
        """Each exported family's rendered pieces (`body` of a plain family, `pieces` of a
        per-object table, never joined), then each extra's (metric None), in exposition
        order; the time each took is summed into `render_seconds` by catalog group (the
        extras under `process`), cleared first. One walk for every format."""
        seconds = self.render_seconds
        seconds.clear()
        clock = time.perf_counter
        for fam in self.visible():
            t = clock()
            if isinstance(fam, TableFamily):
                out = pieces(fam)
            else:
                b = body(fam)
                out = [b] if b else []
            group = fam.metric.group
            seconds[group] = seconds.get(group, 0.0) + clock() - t
            yield fam.metric, out
        for x in self.extras:
            t = clock()
            b = extra(x)
            seconds[PROCESS] = seconds.get(PROCESS, 0.0) + clock() - t
            yield None, [b]

    def hold(self, workloads: Iterable[str]) -> None:
        """Leave these workloads' event-log series out of the exposition until released.

        A process with no checkpoint for a log applies its retained history from the start: a
        scrape in the middle would show a counter climbing from zero through days of old events
        within seconds, a burst in every rate(). Held until caught up, its first exposed sample
        is the caught-up baseline. Logs restored from a checkpoint are never held: their
        counters continue from values already exposed."""
        names = frozenset(workloads)
        if names != self.held.names:
            self.held.names = names
            self.held.version += 1

    def remove_workloads(self, names: Collection[str],
                         groups: Collection[str] | None = None) -> int:
        """Remove every series labelled with one of these workloads, from every family with a
        `workload` label (of `groups` only, when given; per-object families are their source's
        to remove); returns how many. One pass over those families' series."""
        removed = 0
        for fam in self.families.values():
            if isinstance(fam, TableFamily) or "workload" not in fam.metric.labels or (
                    groups is not None and fam.metric.group not in groups):
                continue
            i = fam.metric.labels.index("workload")
            for values in [v for v in fam.series if v[i] in names]:
                fam.remove(*values)
                removed += 1
        return removed

    def __getitem__(self, name: str) -> AnyFamily | TableFamily:
        """Any family by name (to read it; to record, ask for its kind: `counter`, ...)."""
        return self.families[name]

    def _of(self, cls: type[F], name: str) -> F:
        fam = self.families[name]
        if not isinstance(fam, cls):
            raise TypeError(f"{name} is a {fam.metric.kind} metric, not a {cls.__name__}"
                            + (" (per object)" if isinstance(fam, TableFamily) else ""))
        return fam

    def counter(self, name: str) -> CounterFamily:
        return self._of(CounterFamily, name)

    def gauge(self, name: str) -> GaugeFamily:
        """A gauge or info family."""
        return self._of(GaugeFamily, name)

    def histogram(self, name: str) -> HistogramFamily:
        return self._of(HistogramFamily, name)

    def table(self, name: str) -> TableFamily:
        """A per-object family."""
        return self._of(TableFamily, name)

    def series_by_source(self) -> dict[str, int]:
        """Series of the exported families by catalog group, and the extras' as `process`."""
        out: dict[str, int] = {}
        for f in self.visible():
            g = f.metric.group
            out[g] = out.get(g, 0) + (len(f) if isinstance(f, TableFamily) else len(f.series))
        if self.extras:
            out["process"] = sum(x.series for x in self.extras)
        return out

    def series_count(self) -> int:
        return sum(
            len(f) if isinstance(f, TableFamily) else len(f.series)
            for f in self.visible()
        ) + sum(x.series for x in self.extras)
