"""Decoding the protobuf exposition with the official `protobuf` runtime, for the tests.

The messages are client_model's io/prometheus/client/metrics.proto (the fields Prometheus 2.42
reads), declared here through descriptor_pb2 so no protoc is needed; the runtime then parses our
hand-encoded bytes and the tests compare what it finds with the text exposition.
"""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

F = descriptor_pb2.FieldDescriptorProto
OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED

# message -> [(field, number, type, label, message type or None)]
MESSAGES: dict[str, list[tuple[str, int, int, int, str | None]]] = {
    "LabelPair": [("name", 1, F.TYPE_STRING, OPT, None), ("value", 2, F.TYPE_STRING, OPT, None)],
    "Gauge": [("value", 1, F.TYPE_DOUBLE, OPT, None)],
    "Counter": [("value", 1, F.TYPE_DOUBLE, OPT, None),
                ("exemplar", 2, F.TYPE_MESSAGE, OPT, "Exemplar")],
    "Untyped": [("value", 1, F.TYPE_DOUBLE, OPT, None)],
    "Exemplar": [("label", 1, F.TYPE_MESSAGE, REP, "LabelPair"),
                 ("value", 2, F.TYPE_DOUBLE, OPT, None),
                 ("timestamp", 3, F.TYPE_MESSAGE, OPT, ".google.protobuf.Timestamp")],
    "Bucket": [("cumulative_count", 1, F.TYPE_UINT64, OPT, None),
               ("cumulative_count_float", 4, F.TYPE_DOUBLE, OPT, None),
               ("upper_bound", 2, F.TYPE_DOUBLE, OPT, None),
               ("exemplar", 3, F.TYPE_MESSAGE, OPT, "Exemplar")],
    "BucketSpan": [("offset", 1, F.TYPE_SINT32, OPT, None),
                   ("length", 2, F.TYPE_UINT32, OPT, None)],
    "Histogram": [("sample_count", 1, F.TYPE_UINT64, OPT, None),
                  ("sample_count_float", 4, F.TYPE_DOUBLE, OPT, None),
                  ("sample_sum", 2, F.TYPE_DOUBLE, OPT, None),
                  ("bucket", 3, F.TYPE_MESSAGE, REP, "Bucket"),
                  ("schema", 5, F.TYPE_SINT32, OPT, None),
                  ("zero_threshold", 6, F.TYPE_DOUBLE, OPT, None),
                  ("zero_count", 7, F.TYPE_UINT64, OPT, None),
                  ("zero_count_float", 8, F.TYPE_DOUBLE, OPT, None),
                  ("negative_span", 9, F.TYPE_MESSAGE, REP, "BucketSpan"),
                  ("negative_delta", 10, F.TYPE_SINT64, REP, None),
                  ("negative_count", 11, F.TYPE_DOUBLE, REP, None),
                  ("positive_span", 12, F.TYPE_MESSAGE, REP, "BucketSpan"),
                  ("positive_delta", 13, F.TYPE_SINT64, REP, None),
                  ("positive_count", 14, F.TYPE_DOUBLE, REP, None)],
    "Metric": [("label", 1, F.TYPE_MESSAGE, REP, "LabelPair"),
               ("gauge", 2, F.TYPE_MESSAGE, OPT, "Gauge"),
               ("counter", 3, F.TYPE_MESSAGE, OPT, "Counter"),
               ("untyped", 5, F.TYPE_MESSAGE, OPT, "Untyped"),
               ("histogram", 7, F.TYPE_MESSAGE, OPT, "Histogram"),
               ("timestamp_ms", 6, F.TYPE_INT64, OPT, None)],
    "MetricFamily": [("name", 1, F.TYPE_STRING, OPT, None), ("help", 2, F.TYPE_STRING, OPT, None),
                     ("type", 3, F.TYPE_ENUM, OPT, "MetricType"),
                     ("metric", 4, F.TYPE_MESSAGE, REP, "Metric")],
}
TYPES = {"COUNTER": 0, "GAUGE": 1, "SUMMARY": 2, "UNTYPED": 3, "HISTOGRAM": 4,
         "GAUGE_HISTOGRAM": 5}


def _classes() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    fd = descriptor_pb2.FileDescriptorProto(
        name="io/prometheus/client/metrics.proto", package="io.prometheus.client",
        syntax="proto2", dependency=["google/protobuf/timestamp.proto"])
    enum = fd.enum_type.add(name="MetricType")
    for name, number in TYPES.items():
        enum.value.add(name=name, number=number)
    for msg, fields in MESSAGES.items():
        m = fd.message_type.add(name=msg)
        for name, number, typ, label, ref in fields:
            f = m.field.add(name=name, number=number, type=typ, label=label)
            if ref is not None:
                f.type_name = ref if ref.startswith(".") else f".io.prometheus.client.{ref}"
    pool.Add(fd)
    return {name: message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"io.prometheus.client.{name}")) for name in MESSAGES}


CLASSES = _classes()


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return n, pos


def families(data: bytes) -> list[Any]:
    """Each length-delimited MetricFamily, parsed by the protobuf runtime."""
    out, pos = [], 0
    while pos < len(data):
        n, pos = _varint(data, pos)
        mf = CLASSES["MetricFamily"]()
        mf.ParseFromString(data[pos:pos + n])
        out.append(mf)
        pos += n
    return out


def native_buckets(h: Any) -> dict[float, int]:
    """A native histogram's positive buckets as {upper bound: count} (spans and deltas undone)."""
    out, idx, count, deltas = {}, 0, 0, iter(h.positive_delta)
    for span in h.positive_span:
        idx += span.offset  # the first span's start, then the gap after the previous one
        for _ in range(span.length):
            count += next(deltas)
            out[2.0 ** (idx * 2.0 ** -h.schema)] = count
            idx += 1
    return out


def samples(data: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The classic samples the protobuf exposition carries, keyed like the text ones (le as a
    float string from its value, +Inf from the count, as Prometheus derives it)."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for mf in families(data):
        for m in mf.metric:
            labels = tuple(sorted((lp.name, lp.value) for lp in m.label))
            if mf.type == TYPES["HISTOGRAM"]:
                h = m.histogram
                for b in h.bucket:
                    le = tuple(sorted((*labels, ("le", repr(float(b.upper_bound))))))
                    out[(f"{mf.name}_bucket", le)] = b.cumulative_count
                inf = tuple(sorted((*labels, ("le", repr(math.inf)))))
                out[(f"{mf.name}_bucket", inf)] = h.sample_count
                out[(f"{mf.name}_sum", labels)] = h.sample_sum
                out[(f"{mf.name}_count", labels)] = h.sample_count
            elif mf.type == TYPES["COUNTER"]:
                out[(mf.name, labels)] = m.counter.value
            else:
                out[(mf.name, labels)] = m.gauge.value
    return out
