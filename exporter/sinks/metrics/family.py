"""Metric families and the registry built from the catalog."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from exporter import catalog
from exporter.catalog import Kind, Metric
from exporter.sinks.metrics.series import CallbackSeries, HistogramSeries, Series
from exporter.sinks.metrics.table import TableFamily


class Family:
    __slots__ = ("_body", "_om_body", "bounds_ns", "dirty", "live", "metric", "series")

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self.series: dict[tuple[str, ...], Series | HistogramSeries] = {}
        self.dirty: list[Series | HistogramSeries] = []
        self.live: list[CallbackSeries] = []
        self.bounds_ns = tuple(round(b * 1e9) for b in metric.buckets)
        self._body: bytes | None = b""
        self._om_body: bytes | None = b""

    def labels(self, *values: str) -> Series | HistogramSeries:
        s = self.series.get(values)
        if s is None:
            if len(values) != len(self.metric.labels):
                raise ValueError(f"{self.metric.name} takes labels {self.metric.labels}")
            cls = HistogramSeries if self.metric.kind is Kind.HISTOGRAM else Series
            s = self.series[values] = cls(self, values)
        return s

    def callback(self, values: tuple[str, ...], fn: Callable[[], float]) -> CallbackSeries:
        """A series whose value `fn` gives at each scrape."""
        self.remove(*values)
        s = self.series[values] = CallbackSeries(self, values, fn)
        return s

    def remove(self, *values: str) -> None:
        s = self.series.pop(values, None)
        if s is not None:
            self._body = None
            if isinstance(s, CallbackSeries):
                self.live.remove(s)

    def body(self, openmetrics: bool = False) -> bytes:
        """The family's samples; renders only what changed since the last call.

        OpenMetrics differs only where a histogram series has exemplars (`om_line`); the
        OpenMetrics body is joined from the same renders, and is the text body when none has.
        """
        for s in self.live:
            old = s.line
            if s.render() != old:
                self._body = None
        if self.dirty:
            for s in self.dirty:
                if s.line is None:
                    s.render()
            self.dirty.clear()
            self._body = None
        if self._body is None:
            self._body = b"".join([s.line for s in self.series.values()])  # type: ignore[misc]
            self._om_body = None
        if not openmetrics:
            return self._body
        if self._om_body is None:
            om = [s.om_line or s.line for s in self.series.values()]
            self._om_body = b"".join(om) if any(s.om_line for s in self.series.values()) \
                else self._body  # type: ignore[arg-type]
        return self._om_body  # type: ignore[return-value]


class Registry:
    """All families of the catalog, in catalog order."""

    def __init__(self, metrics: Iterable[Metric] = catalog.METRICS) -> None:
        self.families: dict[str, Family | TableFamily] = {
            m.name: TableFamily(m) if m.per_object else Family(m) for m in metrics
        }

    def __getitem__(self, name: str) -> Family:
        return self.families[name]  # type: ignore[return-value]

    def table(self, name: str) -> TableFamily:
        fam = self.families[name]
        if not isinstance(fam, TableFamily):
            raise TypeError(f"{name} is not a per-object metric")
        return fam

    def series_count(self) -> int:
        return sum(
            len(f) if isinstance(f, TableFamily) else len(f.series)
            for f in self.families.values()
        )
