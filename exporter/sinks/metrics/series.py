"""Series that keep their exposition lines rendered.

A series renders its lines only when its value changed since the last scrape, and a family joins
its series' cached bytes at scrape time; a million unchanged series cost one `bytes.join`.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Callable
from typing import Protocol

from exporter.catalog import Metric
from exporter.model.traceids import span_id_of, trace_hex
from exporter.sinks.metrics.native import NativeBuckets, NativeConfig
from exporter.timestamps import parse_rfc3339_ns


class Owner(Protocol):
    """What a series needs of its family (`family.Family`): its metric, and the lists it joins
    when its value changes."""

    @property
    def metric(self) -> Metric: ...
    @property
    def dirty(self) -> list[Series | HistogramSeries]: ...
    @property
    def live(self) -> list[CallbackSeries]: ...
    @property
    def bounds_ns(self) -> tuple[int, ...]: ...
    @property
    def native(self) -> NativeConfig | None: ...
    @property
    def changed(self) -> list[Series | HistogramSeries] | None: ...


def format_value(v: float) -> str:
    if type(v) is int:
        return str(v)
    if math.isfinite(v):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)
    if math.isnan(v):
        return "NaN"
    return "+Inf" if v > 0 else "-Inf"


_NEEDS_ESCAPE = re.compile(r'[\\\n"]').search


def escape_label_value(v: str) -> str:
    if _NEEDS_ESCAPE(v) is None:  # nearly always: one scan instead of three copies
        return v
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def label_block(names: tuple[str, ...], values: tuple[str, ...], extra: str = "") -> str:
    parts = [f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _unsaved(s: Series | HistogramSeries) -> None:
    """The checkpoint's hook: `s` changed since the state layer last stored it (`kept`), so it
    joins its family's `changed` list (None: the family is not checkpointed)."""
    s.kept = False
    changed = s.family.changed
    if changed is not None:
        changed.append(s)


class Series:
    """A counter, gauge or info sample; what may change it is its kind's class."""

    __slots__ = ("family", "kept", "line", "om_line", "prefix", "value", "values")

    def __init__(self, family: Owner, values: tuple[str, ...]) -> None:
        self.family = family
        self.value: float = 0
        self.prefix = family.metric.name + label_block(family.metric.labels, values) + " "
        self.line: bytes | None = None
        self.om_line: bytes | None = None  # only histograms with exemplars differ in OpenMetrics
        self.values = values  # its label values (the protobuf exposition encodes them)
        family.dirty.append(self)
        self.kept = False  # True: the checkpoint holds this value (sinks.metrics.state)
        _unsaved(self)

    def inc(self, n: float = 1) -> None:
        self.value += n
        if self.line is not None:
            self.line = None
            self.family.dirty.append(self)
        if self.kept:
            _unsaved(self)

    def _set(self, v: float) -> None:
        if v != self.value or type(v) is not type(self.value):
            self.value = v
            if self.kept:
                _unsaved(self)
            if self.line is not None:
                self.line = None
                self.family.dirty.append(self)

    def restore(self, v: float) -> None:
        """Continue from a checkpointed value (sinks.metrics.state)."""
        self._set(v)

    def render(self) -> bytes:
        self.line = (self.prefix + format_value(self.value) + "\n").encode()
        return self.line


class CounterSeries(Series):
    """A counter: only goes up (`inc`), or continues from a checkpoint."""

    __slots__ = ()


class GaugeSeries(Series):
    """A gauge (or an info sample, set to 1)."""

    __slots__ = ()

    set = Series._set  # the same function, not a call through: `set` is on hot paths


class CallbackSeries(Series):
    """A sample read from its owner at scrape time: for values that change on nearly every event
    (last seq, units held), which would cost more to push than to pull, or that another thread
    writes. `GaugeCallback` and `CounterCallback` are its two kinds."""

    __slots__ = ("fn",)

    def __init__(self, family: Owner, values: tuple[str, ...], fn: Callable[[], float]) -> None:
        super().__init__(family, values)
        self.fn = fn
        family.dirty.remove(self)
        family.live.append(self)

    def render(self) -> bytes:
        self.value = self.fn()
        return super().render()


class GaugeCallback(CallbackSeries, GaugeSeries):
    __slots__ = ()


class CounterCallback(CallbackSeries, CounterSeries):
    __slots__ = ()


def exemplar_time(at: str) -> tuple[int, int] | None:
    """An exemplar's timestamp, for every format: the RFC 3339 occurred_at as exact (Unix
    seconds, nanoseconds); None if unusable (the exemplar then goes without one)."""
    try:
        return divmod(parse_rfc3339_ns(at), 1_000_000_000)
    except ValueError:
        return None


# A bucket's exemplar: (workload, unit id, ns, occurred_at, span kind, span discriminator or
# None when the span is not known).
Exemplar = tuple[str, str, int, str, str, str | None]


def exemplar_labels(e: Exemplar) -> list[tuple[str, str]]:
    """An exemplar's labels, as OpenMetrics and OpenTelemetry name them: `trace_id` (32 hex
    digits) and, when its span is known, `span_id` (16): 63 characters, within OpenMetrics'
    128 for an exemplar's label set."""
    w, uid, _, _, kind, disc = e
    out = [("trace_id", trace_hex(w, uid))]
    if disc is not None:
        out.append(("span_id", f"{span_id_of(w, uid, kind, disc):016x}"))
    return out


def exemplar_timestamp(at: str) -> str:
    """`exemplar_time` as OpenMetrics text: seconds with 9 fraction digits ("" if unusable)."""
    t = exemplar_time(at)
    return "" if t is None else f" {t[0]}.{t[1]:09d}"


class HistogramSeries:
    """A histogram kept in integer nanoseconds, so sums are exact and bucket edges inclusive.

    Exemplars: each bucket keeps its latest observation's unit and span (as `trace_id` and
    `span_id`, see `model.traceids`), value and event time. They are rendered into `om_line`
    only: the text format 0.0.4 has no exemplars and its parsers reject them. The ids are
    hashed at render time, so an observation costs a tuple store.
    """

    __slots__ = (
        "bounds_ns", "count", "counts", "ex", "family", "kept", "line", "native", "om_line",
        "prefixes", "sum_ns", "values",
    )

    def __init__(self, family: Owner, values: tuple[str, ...]) -> None:
        m = family.metric
        self.family = family
        self.bounds_ns = family.bounds_ns
        self.counts = [0] * (len(self.bounds_ns) + 1)
        self.sum_ns = 0
        self.count = 0
        les = [format_value(b) for b in m.buckets] + ["+Inf"]
        self.prefixes = [
            f"{m.name}_bucket{label_block(m.labels, values, 'le=' + chr(34) + le + chr(34))} "
            for le in les
        ]
        self.prefixes.append(f"{m.name}_sum{label_block(m.labels, values)} ")
        self.prefixes.append(f"{m.name}_count{label_block(m.labels, values)} ")
        self.line: bytes | None = None
        self.om_line: bytes | None = None
        # Per bucket: its latest exemplar, or None.
        self.ex: list[Exemplar | None] | None = None
        # Native buckets beside the classic ones (protobuf exposition only; see native.py).
        self.native = NativeBuckets(family.native) if family.native is not None else None
        self.values = values
        family.dirty.append(self)
        self.kept = False  # as Series.kept
        _unsaved(self)

    def observe_exemplar(self, ns: int, workload: str, unit_id: str, at: str, kind: str = "",
                         span: str | None = None) -> None:
        """`observe_ns`, keeping the unit as the bucket's exemplar (`at`: its occurred_at;
        `kind` and `span`: the span the observation measures, its kind and discriminator as
        in `model.traceids.span_id_of`; None: unknown)."""
        i = self.observe_ns(ns)
        ex = self.ex
        if ex is None:
            ex = self.ex = [None] * len(self.counts)
        ex[i] = (workload, unit_id, ns, at, kind, span)

    def observe_ns(self, ns: int) -> int:
        """Returns the bucket the observation fell in."""
        i = bisect_left(self.bounds_ns, ns)
        self.counts[i] += 1
        self.sum_ns += ns
        self.count += 1
        if self.native is not None:
            self.native.observe_ns(ns)
        if self.line is not None:
            self.line = None
            self.family.dirty.append(self)
        if self.kept:
            _unsaved(self)
        return i

    def observe(self, seconds: float) -> None:
        self.observe_ns(round(seconds * 1e9))

    def restore(self, counts: list[int], sum_ns: int | str, count: int) -> None:
        """Continue from checkpointed values (sinks.metrics.state)."""
        if len(counts) != len(self.counts) or sum(counts) != count:
            raise ValueError(f"{self.family.metric.name}: histogram state does not fit")
        self.counts = [int(c) for c in counts]
        self.sum_ns = int(sum_ns)
        self.count = int(count)
        if self.kept:
            _unsaved(self)
        if self.line is not None:
            self.line = None
            self.family.dirty.append(self)

    def native_state(self) -> dict[str, int | list[int]] | None:
        """The native buckets as plain data (ints only), for the checkpoint; None without."""
        return None if self.native is None else self.native.state()

    def restore_native(self, state: dict[str, int | list[int]]) -> None:
        """Back to a `native_state()` (nothing to do when native buckets are off); marks the
        series changed so every format renders it again."""
        if self.native is None:
            return
        self.native.restore(state)
        if self.kept:
            _unsaved(self)
        if self.line is not None:
            self.line = None
            self.family.dirty.append(self)

    def render(self) -> bytes:
        p = self.prefixes
        out = []
        acc = 0
        for i, c in enumerate(self.counts):
            acc += c
            out.append(f"{p[i]}{acc}\n")
        tail = f"{p[-2]}{format_value(self.sum_ns / 1e9)}\n{p[-1]}{self.count}\n"
        out.append(tail)
        self.line = "".join(out).encode()
        ex = self.ex
        if ex is not None:
            om = []
            for line, e in zip(out, ex, strict=False):  # bucket lines pair with their exemplar
                if e is None:
                    om.append(line)
                else:
                    labels = ",".join([f'{k}="{v}"' for k, v in exemplar_labels(e)])
                    ns, at = e[2], e[3]
                    om.append(
                        f"{line[:-1]} # {{{labels}}} "
                        f"{format_value(ns / 1e9)}{exemplar_timestamp(at) if at else ''}\n"
                    )
            om.append(tail)
            self.om_line = "".join(om).encode()
        return self.line
