"""The registry hands out families by kind, and each kind's series has its kind's methods only."""

from __future__ import annotations

import pytest

from exporter.catalog import Kind, Metric
from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.metrics.family import (
    CounterFamily,
    GaugeFamily,
    HistogramFamily,
    Registry,
)
from exporter.sinks.metrics.series import (
    CallbackSeries,
    CounterCallback,
    CounterSeries,
    GaugeCallback,
    GaugeSeries,
    HistogramSeries,
)
from exporter.sinks.metrics.table import TableFamily

METRICS = (
    Metric("t_done_total", Kind.COUNTER, "Done.", ("w",)),
    Metric("t_level", Kind.GAUGE, "Level.", ("w",)),
    Metric("t_build_info", Kind.INFO, "Build.", ("version",)),
    Metric("t_wait_seconds", Kind.HISTOGRAM, "Wait.", ("w",), buckets=(0.1, 1.0)),
    Metric("t_obj_value", Kind.GAUGE, "Per object.", ("o",), per_object=True),
)


def test_each_kind_gets_its_family_and_series_class() -> None:
    r = Registry(METRICS, native=None)
    assert type(r.counter("t_done_total")) is CounterFamily
    assert type(r.gauge("t_level")) is GaugeFamily
    assert type(r.gauge("t_build_info")) is GaugeFamily  # an info metric is a gauge set to 1
    assert type(r.histogram("t_wait_seconds")) is HistogramFamily
    assert type(r.table("t_obj_value")) is TableFamily
    assert type(r.counter("t_done_total").labels("a")) is CounterSeries
    assert type(r.gauge("t_level").labels("a")) is GaugeSeries
    assert type(r.histogram("t_wait_seconds").labels("a")) is HistogramSeries
    assert r["t_done_total"] is r.counter("t_done_total")  # by name, any kind: the same family


@pytest.mark.parametrize(("ask", "name", "said"), [
    ("counter", "t_level", "t_level is a gauge metric, not a CounterFamily"),
    ("gauge", "t_done_total", "t_done_total is a counter metric, not a GaugeFamily"),
    ("histogram", "t_done_total", "not a HistogramFamily"),
    ("counter", "t_wait_seconds", "t_wait_seconds is a histogram metric, not a CounterFamily"),
    ("gauge", "t_obj_value", "not a GaugeFamily (per object)"),
    ("table", "t_level", "t_level is a gauge metric, not a TableFamily"),
])
def test_asking_for_the_wrong_kind_fails_at_once(ask: str, name: str, said: str) -> None:
    r = Registry(METRICS, native=None)
    with pytest.raises(TypeError, match=said.replace("(", r"\(").replace(")", r"\)")):
        getattr(r, ask)(name)


def test_a_counter_has_no_set_and_a_gauge_has_set() -> None:
    r = Registry(METRICS, native=None)
    c, g = r.counter("t_done_total").labels("a"), r.gauge("t_level").labels("a")
    assert not hasattr(c, "set")
    c.inc(2)
    c.restore(5)  # a checkpoint's value: the one way a counter is set
    g.set(3.5)
    g.inc()
    text = render_bytes(r).decode()
    assert 't_done_total{w="a"} 5\n' in text
    assert 't_level{w="a"} 4.5\n' in text


def test_callbacks_keep_their_kind_and_are_read_at_scrape() -> None:
    r = Registry(METRICS, native=None)
    box = {"n": 1}
    c = r.counter("t_done_total").callback(("a",), lambda: box["n"])
    g = r.gauge("t_level").callback(("a",), lambda: box["n"] * 2)
    assert isinstance(c, CounterCallback) and isinstance(c, CounterSeries)
    assert isinstance(g, GaugeCallback) and isinstance(g, GaugeSeries)
    assert isinstance(c, CallbackSeries) and isinstance(g, CallbackSeries)
    assert 't_done_total{w="a"} 1\n' in render_bytes(r).decode()
    box["n"] = 7
    text = render_bytes(r).decode()
    assert 't_done_total{w="a"} 7\n' in text
    assert 't_level{w="a"} 14\n' in text
