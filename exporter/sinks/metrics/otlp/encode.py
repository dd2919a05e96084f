"""The protobuf exposition's families as OTLP `ResourceMetrics`, cumulative.

Counters are monotonic cumulative Sums, gauges and info samples Gauges, a histogram's classic
buckets a Histogram with explicit bounds and its native buckets (when on) an
ExponentialHistogram of the same name: Prometheus' schema is OTLP's scale, and Prometheus'
bucket i, (base^(i-1), base^i], is OTLP's bucket i-1, (base^(i-1), base^i]. Exemplars keep
their trace id. Each cumulative point carries its series' start time (starts.py); gauges none.

Built with opentelemetry-proto's generated messages (upb); one request holds at most
`max_points` points, so a large fleet goes as several requests, and a request the receiver
finds too large is split again (`split`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb

from exporter import __version__
from exporter.sinks.metrics.otlp import client_model as cm
from exporter.sinks.metrics.otlp.names import otel_name
from exporter.sinks.metrics.otlp.starts import Key

CUMULATIVE = pb.AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
SCOPE = "zaroz-exporter"
StartOf = Callable[[str, str], int]  # family name, label values (JSON list) -> start ns


def resource_attributes(attrs: Mapping[str, str]) -> list[KeyValue]:
    return [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attrs.items()]


def starts_of(known: Mapping[Key, int], epoch: int, process_start: int,
              restarting: frozenset[str], catalog: frozenset[str]) -> StartOf:
    """A series' start time: its stored one; else (a count read from the model at scrape
    time, continued across restarts) the state's oldest; a family that restarts at zero with
    the process (`restarting`, and families from outside the catalog) the process' start."""
    def start(name: str, key: str) -> int:
        ns = known.get((name, key))
        if ns is not None:
            return ns
        return process_start if name in restarting or name not in catalog else epoch
    return start


def _attrs(labels: Any) -> tuple[list[KeyValue], str]:
    values = [lp.value for lp in labels]
    kvs = [KeyValue(key=lp.name, value=AnyValue(string_value=lp.value)) for lp in labels]
    return kvs, orjson.dumps(values).decode()


def _counts(spans: Any, deltas: Any) -> tuple[int, list[int]]:
    """Native spans and deltas -> (first Prometheus index, dense absolute counts)."""
    counts: list[int] = []
    first = idx = 0
    acc = 0
    d = iter(deltas)
    for n, span in enumerate(spans):
        if n == 0:
            first = idx = span.offset
        else:
            gap = span.offset
            counts.extend([0] * gap)
            idx += gap
        for _ in range(span.length):
            acc += next(d)
            counts.append(acc)
            idx += 1
    return first, counts


def _exemplar(e: Any, out: Any) -> None:
    x = out.exemplars.add()
    x.as_double = e.value
    if e.HasField("timestamp"):
        x.time_unix_nano = e.timestamp.seconds * 1_000_000_000 + e.timestamp.nanos
    for lp in e.label:
        if lp.name == "trace_id" and len(lp.value) == 32:
            x.trace_id = bytes.fromhex(lp.value)
        else:
            x.filtered_attributes.add(key=lp.name, value=AnyValue(string_value=lp.value))


def metrics(families: Iterable[Any], now_ns: int, start_of: StartOf,
            exponential: bool = True) -> Iterator[tuple[pb.Metric, int]]:
    """Each family as OTLP Metrics (two for a histogram with native buckets), with its points
    (`exponential`: False leaves the native buckets out)."""
    for fam in families:
        name, kind = fam.name, fam.type
        if kind == cm.COUNTER:
            oname, unit = otel_name(name, True)
            m = pb.Metric(name=oname, description=fam.help, unit=unit)
            s = m.sum
            s.aggregation_temporality = CUMULATIVE
            s.is_monotonic = True
            for x in fam.metric:
                kvs, key = _attrs(x.label)
                s.data_points.add(attributes=kvs, start_time_unix_nano=start_of(name, key),
                                  time_unix_nano=now_ns, as_double=x.counter.value)
            yield m, len(fam.metric)
        elif kind == cm.HISTOGRAM:
            oname, unit = otel_name(name, False)
            m = pb.Metric(name=oname, description=fam.help, unit=unit)
            h = m.histogram
            h.aggregation_temporality = CUMULATIVE
            em = None
            for x in fam.metric:
                kvs, key = _attrs(x.label)
                start = start_of(name, key)
                hx = x.histogram
                p = h.data_points.add(attributes=kvs, start_time_unix_nano=start,
                                      time_unix_nano=now_ns, count=hx.sample_count,
                                      sum=hx.sample_sum)
                prev = 0
                bounds, counts = [], []
                for b in hx.bucket:
                    if math.isinf(b.upper_bound):
                        continue
                    bounds.append(b.upper_bound)
                    counts.append(b.cumulative_count - prev)
                    prev = b.cumulative_count
                    if b.HasField("exemplar"):
                        _exemplar(b.exemplar, p)
                counts.append(hx.sample_count - prev)
                p.explicit_bounds.extend(bounds)
                p.bucket_counts.extend(counts)
                if exponential and hx.zero_threshold > 0:  # native buckets
                    if em is None:
                        em = pb.Metric(name=oname, description=fam.help, unit=unit)
                        em.exponential_histogram.aggregation_temporality = CUMULATIVE
                    e = em.exponential_histogram.data_points.add(
                        attributes=kvs, start_time_unix_nano=start, time_unix_nano=now_ns,
                        count=hx.sample_count, sum=hx.sample_sum, scale=hx.schema,
                        zero_count=hx.zero_count, zero_threshold=hx.zero_threshold)
                    if hx.positive_span:
                        first, dense = _counts(hx.positive_span, hx.positive_delta)
                        e.positive.offset = first - 1
                        e.positive.bucket_counts.extend(dense)
                    if hx.negative_span:
                        first, dense = _counts(hx.negative_span, hx.negative_delta)
                        e.negative.offset = first - 1
                        e.negative.bucket_counts.extend(dense)
            yield m, len(fam.metric)
            if em is not None:
                yield em, len(fam.metric)
        else:  # gauges, info samples, untyped
            oname, unit = otel_name(name, False)
            m = pb.Metric(name=oname, description=fam.help, unit=unit)
            g = m.gauge
            for x in fam.metric:
                kvs, _ = _attrs(x.label)
                v = x.gauge.value if x.HasField("gauge") else x.untyped.value
                g.data_points.add(attributes=kvs, time_unix_nano=now_ns, as_double=v)
            yield m, len(fam.metric)


def _points(m: pb.Metric) -> Any:
    return getattr(m, m.WhichOneof("data") or "gauge").data_points


def _halves(m: pb.Metric, max_points: int) -> Iterator[pb.Metric]:
    """A metric with more than `max_points` points as several, each with at most that many."""
    pts = _points(m)
    if len(pts) <= max_points:
        yield m
        return
    kind = m.WhichOneof("data") or "gauge"
    for i in range(0, len(pts), max_points):
        part = pb.Metric(name=m.name, description=m.description, unit=m.unit)
        body = getattr(part, kind)
        if kind != "gauge":
            body.aggregation_temporality = CUMULATIVE
        if kind == "sum":
            body.is_monotonic = True
        body.data_points.extend(pts[i:i + max_points])
        yield part


def requests(metrics: Iterable[tuple[pb.Metric, int]], resource: list[KeyValue],
             max_points: int) -> Iterator[tuple[ExportMetricsServiceRequest, int]]:
    """The metrics as requests of at most `max_points` points each (and their point count)."""
    req: ExportMetricsServiceRequest | None = None
    sm: Any = None
    n = 0

    def new() -> tuple[ExportMetricsServiceRequest, Any]:
        r = ExportMetricsServiceRequest()
        rm = r.resource_metrics.add()
        rm.resource.attributes.extend(resource)
        s = rm.scope_metrics.add()
        s.scope.name, s.scope.version = SCOPE, __version__
        return r, s

    for m, _ in metrics:
        for part in _halves(m, max_points):
            size = len(_points(part))
            if req is not None and n + size > max_points:
                yield req, n
                req = None
            if req is None:
                req, sm = new()
                n = 0
            sm.metrics.append(part)
            n += size
    if req is not None and n:
        yield req, n


def split(req: ExportMetricsServiceRequest) -> list[ExportMetricsServiceRequest]:
    """A request in two of about half its points each (one the receiver found too large);
    [req] when it holds a single point."""
    rm = req.resource_metrics[0]
    ms = list(rm.scope_metrics[0].metrics)
    total = sum(len(_points(m)) for m in ms)
    if total <= 1:
        return [req]
    parts: list[pb.Metric] = []
    for m in ms:
        parts.extend(_halves(m, max(1, (total + 1) // 2)))
    resource = list(rm.resource.attributes)
    out: list[ExportMetricsServiceRequest] = []
    half: list[pb.Metric] = []
    count = 0
    for m in parts:
        half.append(m)
        count += len(_points(m))
        if count * 2 >= total and len(out) == 0:
            out.append(_request(half, resource))
            half, count = [], 0
    if half:
        out.append(_request(half, resource))
    return out


def _request(ms: list[pb.Metric], resource: list[KeyValue]) -> ExportMetricsServiceRequest:
    r = ExportMetricsServiceRequest()
    rm = r.resource_metrics.add()
    rm.resource.attributes.extend(resource)
    s = rm.scope_metrics.add()
    s.scope.name, s.scope.version = SCOPE, __version__
    s.metrics.extend(ms)
    return r
