"""client_model's `MetricFamily` as a message class of the `protobuf` runtime (upb), declared
through descriptor_pb2 (no protoc), to read back the protobuf exposition we encode by hand.

Reading the exposition rather than the registry gives the OTLP export exactly what a protobuf
scrape serves (the same families, allowlist, held workloads and per-object tables) from one
immutable snapshot, which the export then maps off the event loop.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from typing import Any

# The runtime opentelemetry-proto's messages use; imported by name (it ships no type stubs).
descriptor_pb2: Any = importlib.import_module("google.protobuf.descriptor_pb2")
descriptor_pool: Any = importlib.import_module("google.protobuf.descriptor_pool")
message_factory: Any = importlib.import_module("google.protobuf.message_factory")

F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED

_MESSAGES: dict[str, list[tuple[str, int, int, int, str | None]]] = {
    "LabelPair": [("name", 1, F.TYPE_STRING, _OPT, None), ("value", 2, F.TYPE_STRING, _OPT, None)],
    "Timestamp": [("seconds", 1, F.TYPE_INT64, _OPT, None), ("nanos", 2, F.TYPE_INT32, _OPT, None)],
    "Gauge": [("value", 1, F.TYPE_DOUBLE, _OPT, None)],
    "Counter": [("value", 1, F.TYPE_DOUBLE, _OPT, None)],
    "Untyped": [("value", 1, F.TYPE_DOUBLE, _OPT, None)],
    "Exemplar": [("label", 1, F.TYPE_MESSAGE, _REP, "LabelPair"),
                 ("value", 2, F.TYPE_DOUBLE, _OPT, None),
                 ("timestamp", 3, F.TYPE_MESSAGE, _OPT, "Timestamp")],
    "Bucket": [("cumulative_count", 1, F.TYPE_UINT64, _OPT, None),
               ("upper_bound", 2, F.TYPE_DOUBLE, _OPT, None),
               ("exemplar", 3, F.TYPE_MESSAGE, _OPT, "Exemplar")],
    "BucketSpan": [("offset", 1, F.TYPE_SINT32, _OPT, None),
                   ("length", 2, F.TYPE_UINT32, _OPT, None)],
    "Histogram": [("sample_count", 1, F.TYPE_UINT64, _OPT, None),
                  ("sample_sum", 2, F.TYPE_DOUBLE, _OPT, None),
                  ("bucket", 3, F.TYPE_MESSAGE, _REP, "Bucket"),
                  ("schema", 5, F.TYPE_SINT32, _OPT, None),
                  ("zero_threshold", 6, F.TYPE_DOUBLE, _OPT, None),
                  ("zero_count", 7, F.TYPE_UINT64, _OPT, None),
                  ("negative_span", 9, F.TYPE_MESSAGE, _REP, "BucketSpan"),
                  ("negative_delta", 10, F.TYPE_SINT64, _REP, None),
                  ("positive_span", 12, F.TYPE_MESSAGE, _REP, "BucketSpan"),
                  ("positive_delta", 13, F.TYPE_SINT64, _REP, None)],
    "Metric": [("label", 1, F.TYPE_MESSAGE, _REP, "LabelPair"),
               ("gauge", 2, F.TYPE_MESSAGE, _OPT, "Gauge"),
               ("counter", 3, F.TYPE_MESSAGE, _OPT, "Counter"),
               ("untyped", 5, F.TYPE_MESSAGE, _OPT, "Untyped"),
               ("histogram", 7, F.TYPE_MESSAGE, _OPT, "Histogram")],
    "MetricFamily": [("name", 1, F.TYPE_STRING, _OPT, None),
                     ("help", 2, F.TYPE_STRING, _OPT, None),
                     ("type", 3, F.TYPE_INT32, _OPT, None),
                     ("metric", 4, F.TYPE_MESSAGE, _REP, "Metric")],
}
COUNTER, GAUGE, UNTYPED, HISTOGRAM = 0, 1, 3, 4
_PACKAGE = "zaroz.client_model"


def _message_class() -> Any:
    fd = descriptor_pb2.FileDescriptorProto(name="zaroz_client_model.proto", package=_PACKAGE,
                                            syntax="proto3")
    for name, fields in _MESSAGES.items():
        m = fd.message_type.add(name=name)
        for fname, number, ftype, label, tname in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if tname is not None:
                f.type_name = f".{_PACKAGE}.{tname}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.MetricFamily"))


MetricFamily = _message_class()
LabelPair = message_factory.GetMessageClass(
    MetricFamily.DESCRIPTOR.file.pool.FindMessageTypeByName(f"{_PACKAGE}.LabelPair"))


def _varint(data: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, i
        shift += 7


class RawFamily:
    """A MetricFamily read by hand to its Metric payloads (what the OTLP mapping of sums and
    gauges reads byte by byte); `parsed()` gives the message for the rest."""

    __slots__ = ("data", "help", "metrics", "name", "type")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.name = self.help = ""
        self.type = UNTYPED
        self.metrics: list[bytes] = []
        i, n = 0, len(data)
        while i < n:
            tag = data[i]
            if tag == 0x18:
                self.type, i = _varint(data, i + 1)
                continue
            size, j = _varint(data, i + 1)
            payload = data[j:j + size]
            if tag == 0x22:
                self.metrics.append(payload)
            elif tag == 0x0A:
                self.name = payload.decode()
            elif tag == 0x12:
                self.help = payload.decode()
            i = j + size

    def parsed(self) -> Any:
        return MetricFamily.FromString(self.data)


def raw_families(chunks: Iterable[bytes]) -> Iterator[RawFamily]:
    """The families of a delimited protobuf exposition, read by hand (see RawFamily)."""
    data = b"".join(chunks)
    i, n = 0, len(data)
    while i < n:
        size, i = _varint(data, i)
        yield RawFamily(data[i:i + size])
        i += size


def families(chunks: Iterable[bytes]) -> Iterator[Any]:
    """The MetricFamily messages of a delimited protobuf exposition, given as its chunks (a
    message may span chunks: per-object families come as many pieces)."""
    data = b"".join(chunks)
    i, n = 0, len(data)
    parse = MetricFamily.FromString
    while i < n:
        size = shift = 0
        while True:
            b = data[i]
            i += 1
            size |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        yield parse(data[i:i + size])
        i += size
