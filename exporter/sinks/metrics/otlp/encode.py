"""The protobuf exposition's families as OTLP `ResourceMetrics`, cumulative.

Counters are monotonic cumulative Sums, gauges and info samples Gauges, a histogram's classic
buckets a Histogram with explicit bounds and its native buckets (when on) an
ExponentialHistogram of the same name: Prometheus' schema is OTLP's scale, and Prometheus'
bucket i, (base^(i-1), base^i], is OTLP's bucket i-1, (base^(i-1), base^i]. Exemplars keep
their trace and span ids (the exposition's `trace_id` and `span_id` labels). Each cumulative
point carries its series' start time (starts.py); gauges none.

Sums and gauges, nearly every point at 100k units, are written to the wire by hand:
opentelemetry-proto's generated messages (upb) cost ~100 µs a point here (a KeyValue and an
AnyValue object per label; bench/otlp_metrics.py), over two minutes of CPU an export at 1.2M
series, where bytes of each label pair are cached and joined. Histograms, a few thousand
series, are built with the messages and serialized. One request holds at most `max_points`
points, so a large fleet goes as several requests, and a request the receiver finds too
large is split again (`split`). tests decode every request with the official messages.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb

from exporter import __version__
from exporter.sinks.metrics.otlp import client_model as cm
from exporter.sinks.metrics.otlp.names import otel_name
from exporter.sinks.metrics.otlp.starts import Key
from exporter.sinks.varint import varint

CUMULATIVE = pb.AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
SCOPE = "zaroz-exporter"
StartOf = Callable[[str, str], int]  # family name, label values (JSON list) -> start ns


_q = struct.Struct("<Q").pack
_d = struct.Struct("<d").pack
# (label name, value) -> its KeyValue message, encoded: values repeat across families and
# exports (namespaces, workloads, states). Cleared when full, so it stays bounded.
_KV: dict[tuple[str, str], bytes] = {}
_KV_MAX = 1 << 17


def _kv(name: str, value: str) -> bytes:
    enc = _KV.get((name, value))
    if enc is None:
        k, v = name.encode(), value.encode()
        any_value = b"\x0a" + varint(len(v)) + v
        enc = b"\x0a" + varint(len(k)) + k + b"\x12" + varint(len(any_value)) + any_value
        if len(_KV) >= _KV_MAX:
            _KV.clear()
        _KV[name, value] = enc
    return enc


def _len(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def resource_attributes(attrs: Mapping[str, str]) -> bytes:
    """Resource.attributes, encoded."""
    return b"".join([_len(b"\x0a", _kv(k, v)) for k, v in attrs.items()])


class Part:
    """One Metric of a request: its name, description and unit, which data field it fills
    (`tag`), its data points (each an encoded `data_points` field) and what follows them."""

    __slots__ = ("head", "points", "tag", "tail")

    def __init__(self, head: bytes, tag: bytes, points: list[bytes], tail: bytes) -> None:
        self.head, self.tag, self.points, self.tail = head, tag, points, tail

    def encode(self) -> bytes:
        return self.head + _len(self.tag, b"".join(self.points) + self.tail)

    def sliced(self, i: int, j: int) -> Part:
        return Part(self.head, self.tag, self.points[i:j], self.tail)


def _head(name: str, description: str, unit: str) -> bytes:
    out = _len(b"\x0a", name.encode()) + _len(b"\x12", description.encode())
    return out + _len(b"\x1a", unit.encode()) if unit else out


_GAUGE, _SUM, _HISTOGRAM, _EXPONENTIAL = b"\x2a", b"\x3a", b"\x4a", b"\x52"
_CUMULATIVE = b"\x10" + varint(CUMULATIVE)
_MONOTONIC = _CUMULATIVE + b"\x18\x01"


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
        elif lp.name == "span_id" and len(lp.value) == 16:
            x.span_id = bytes.fromhex(lp.value)
        else:
            x.filtered_attributes.add(key=lp.name, value=AnyValue(string_value=lp.value))


def _number(attrs: bytes, start: int | None, now: bytes, value: bytes) -> bytes:
    """A NumberDataPoint as a `data_points` field; `value`: the double's 8 bytes."""
    point = attrs + (b"" if start is None else b"\x11" + _q(start)) + now + b"\x21" + value
    return _len(b"\x0a", point)


# LabelPair message bytes -> NumberDataPoint.attributes (field 7) holding it as a KeyValue.
_ATTRS: dict[bytes, bytes] = {}


def _attr(pair: bytes) -> bytes:
    enc = _ATTRS.get(pair)
    if enc is None:
        lp = cm.LabelPair.FromString(pair)
        enc = _len(b"\x3a", _kv(lp.name, lp.value))
        if len(_ATTRS) >= _KV_MAX:
            _ATTRS.clear()
        _ATTRS[pair] = enc
    return enc


_VALUE_TAGS = frozenset((0x12, 0x1A, 0x2A))  # Metric.gauge, .counter, .untyped


def _scalar(payload: bytes) -> tuple[bytes, bytes] | None:
    """A counter's or gauge's Metric payload as (attributes, the value's 8 bytes): its labels,
    then its value last (`<tag> 09 09 <double>`, as every encoder of the exposition writes
    it); None for any other layout (then read with the message)."""
    if len(payload) < 11 or payload[-11] not in _VALUE_TAGS or payload[-10:-8] != b"\x09\x09":
        return None
    out = []
    i, end = 0, len(payload) - 11
    attr = _attr
    while i < end:
        if payload[i] != 0x0A:
            return None
        size = payload[i + 1]
        if size < 0x80:
            out.append(attr(payload[i + 2:i + 2 + size]))
            i += 2 + size
        else:
            size, j = cm._varint(payload, i + 1)
            out.append(attr(payload[j:j + size]))
            i = j + size
    return b"".join(out), payload[-8:]


def _scalars(fam: cm.RawFamily) -> list[tuple[bytes, bytes, list[str] | None]]:
    """Each series' attributes, value bytes and (read with the message, for a layout the fast
    path does not know) its label values."""
    out: list[tuple[bytes, bytes, list[str] | None]] = []
    slow = None
    for k, payload in enumerate(fam.metrics):
        got = _scalar(payload)
        if got is not None:
            out.append((*got, None))
            continue
        if slow is None:
            slow = fam.parsed().metric
        x = slow[k]
        v = x.counter.value if x.HasField("counter") else (
            x.gauge.value if x.HasField("gauge") else x.untyped.value)
        attrs = b"".join([_len(b"\x3a", _kv(lp.name, lp.value)) for lp in x.label])
        out.append((attrs, _d(v), [lp.value for lp in x.label]))
    return out


def _message_part(m: pb.Metric, tag: bytes, body: Any) -> Part:
    """A Metric built with the generated messages, as a Part (its points serialized)."""
    return Part(_head(m.name, m.description, m.unit), tag,
                [_len(b"\x0a", p.SerializeToString()) for p in body.data_points], _CUMULATIVE)


def metrics(families: Iterable[cm.RawFamily], now_ns: int, start_of: StartOf,
            exponential: bool = True) -> Iterator[Part]:
    """Each family as OTLP Metrics (two for a histogram with native buckets), with its points
    (`exponential`: False leaves the native buckets out)."""
    now = b"\x19" + _q(now_ns)
    dumps = orjson.dumps
    for fam in families:
        name, kind = fam.name, fam.type
        if kind == cm.HISTOGRAM:
            yield from _histograms(fam.parsed(), now_ns, start_of, exponential)
            continue
        monotonic = kind == cm.COUNTER
        oname, unit = otel_name(name, monotonic)
        points = []
        if monotonic:  # the start time is looked up by the label values
            parsed = None
            for k, (attrs, value, values) in enumerate(_scalars(fam)):
                if values is None:
                    if parsed is None:
                        parsed = fam.parsed().metric
                    values = [lp.value for lp in parsed[k].label]
                start = start_of(name, dumps(values).decode())
                points.append(_number(attrs, start, now, value))
            yield Part(_head(oname, fam.help, unit), _SUM, points, _MONOTONIC)
        else:  # gauges, info samples, untyped
            points = [_number(attrs, None, now, value) for attrs, value, _ in _scalars(fam)]
            yield Part(_head(oname, fam.help, unit), _GAUGE, points, b"")


def _histograms(fam: Any, now_ns: int, start_of: StartOf, exponential: bool) -> Iterator[Part]:
    name = fam.name
    oname, unit = otel_name(name, False)
    m = pb.Metric(name=oname, description=fam.help, unit=unit)
    h = m.histogram
    h.aggregation_temporality = CUMULATIVE
    em = None
    for x in fam.metric:
        kvs = [KeyValue(key=lp.name, value=AnyValue(string_value=lp.value)) for lp in x.label]
        start = start_of(name, orjson.dumps([lp.value for lp in x.label]).decode())
        hx = x.histogram
        p = h.data_points.add(attributes=kvs, start_time_unix_nano=start,
                              time_unix_nano=now_ns, count=hx.sample_count, sum=hx.sample_sum)
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
    yield _message_part(m, _HISTOGRAM, h)
    if em is not None:
        yield _message_part(em, _EXPONENTIAL, em.exponential_histogram)


Request = list[Part]


def requests(parts: Iterable[Part], max_points: int) -> Iterator[tuple[Request, int]]:
    """The parts as requests of at most `max_points` points each (and their point count); a
    metric with more points is sliced across requests."""
    req: Request = []
    n = 0
    for part in parts:
        pts = len(part.points)  # 0: a family with no series, nothing to send
        i = 0
        while i < pts:
            if n >= max_points:
                yield req, n
                req, n = [], 0
            j = min(pts, i + max_points - n)
            req.append(part if i == 0 and j == pts else part.sliced(i, j))
            n += j - i
            i = j
    if req:
        yield req, n


def split(req: Request) -> list[Request]:
    """A request in two of about half its points each (one the receiver found too large);
    [req] when it holds a single point."""
    total = sum(len(p.points) for p in req)
    if total <= 1:
        return [req]
    half = (total + 1) // 2
    return [r for r, _ in requests(req, half)]


def encode_request(req: Request, resource: bytes) -> bytes:
    """ExportMetricsServiceRequest: one ResourceMetrics, one ScopeMetrics, the parts."""
    scope = _len(b"\x0a", SCOPE.encode()) + _len(b"\x12", __version__.encode())
    sm = _len(b"\x0a", scope) + b"".join([_len(b"\x12", p.encode()) for p in req])
    rm = _len(b"\x0a", resource) + _len(b"\x12", sm)
    return _len(b"\x0a", rm)


