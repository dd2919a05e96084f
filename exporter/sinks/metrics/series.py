"""Series that keep their exposition lines rendered.

A series renders its lines only when its value changed since the last scrape, and a family joins
its series' cached bytes at scrape time; a million unchanged series cost one `bytes.join`.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter.sinks.metrics.family import Family


def format_value(v: float) -> str:
    if type(v) is int:
        return str(v)
    if math.isfinite(v):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)
    if math.isnan(v):
        return "NaN"
    return "+Inf" if v > 0 else "-Inf"


def escape_label_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def label_block(names: tuple[str, ...], values: tuple[str, ...], extra: str = "") -> str:
    parts = [f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class Series:
    """A counter, gauge or info sample."""

    __slots__ = ("family", "line", "prefix", "value")

    def __init__(self, family: Family, values: tuple[str, ...]) -> None:
        self.family = family
        self.value: float = 0
        self.prefix = family.metric.name + label_block(family.metric.labels, values) + " "
        self.line: bytes | None = None
        family.dirty.append(self)

    def inc(self, n: float = 1) -> None:
        self.value += n
        if self.line is not None:
            self.line = None
            self.family.dirty.append(self)

    def set(self, v: float) -> None:
        if v != self.value or type(v) is not type(self.value):
            self.value = v
            if self.line is not None:
                self.line = None
                self.family.dirty.append(self)

    def render(self) -> bytes:
        self.line = (self.prefix + format_value(self.value) + "\n").encode()
        return self.line


class CallbackSeries(Series):
    """A gauge read from its owner at scrape time: for values that change on nearly every event
    (last seq, units held), which would cost more to push than to pull."""

    __slots__ = ("fn",)

    def __init__(self, family: Family, values: tuple[str, ...], fn: Callable[[], float]) -> None:
        super().__init__(family, values)
        self.fn = fn
        family.dirty.remove(self)
        family.live.append(self)

    def render(self) -> bytes:
        self.value = self.fn()
        return super().render()


class HistogramSeries:
    """A histogram kept in integer nanoseconds, so sums are exact and bucket edges inclusive."""

    __slots__ = ("bounds_ns", "count", "counts", "family", "line", "prefixes", "sum_ns")

    def __init__(self, family: Family, values: tuple[str, ...]) -> None:
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
        family.dirty.append(self)

    def observe_ns(self, ns: int) -> None:
        self.counts[bisect_left(self.bounds_ns, ns)] += 1
        self.sum_ns += ns
        self.count += 1
        if self.line is not None:
            self.line = None
            self.family.dirty.append(self)

    def observe(self, seconds: float) -> None:
        self.observe_ns(round(seconds * 1e9))

    def render(self) -> bytes:
        p = self.prefixes
        out = []
        acc = 0
        for i, c in enumerate(self.counts):
            acc += c
            out.append(f"{p[i]}{acc}\n")
        out.append(f"{p[-2]}{format_value(self.sum_ns / 1e9)}\n{p[-1]}{self.count}\n")
        self.line = "".join(out).encode()
        return self.line
