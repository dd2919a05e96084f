"""Span records -> OTLP `ExportTraceServiceRequest` bytes, written straight from the records.

Why by hand: going through SDK span objects and the SDK's encoder cost ~4x the span building
itself (bench/traces.py: each SDK span is started, its attributes cleaned into
BoundedAttributes, ended, queued, then read back into protobuf messages one field at a time).
The records already hold what OTLP needs (ids and nanosecond times as integers), and most
attributes repeat (the workload, the unit's id on each of its spans, outcomes), so each
distinct key/value pair is encoded once and reused.

The bytes are the protobuf wire format of opentelemetry-proto's messages, fields in number
order, as the SDK's encoder sets them: kind INTERNAL, `flags` saying the parent is local,
a status on every span. Tests parse them with opentelemetry-proto and compare with the SDK's
own encoding of the same spans.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from struct import Struct
from typing import Any

from exporter.sinks.traces.builder import SpanRecord
from exporter.sinks.varint import varint

_Q = Struct("<Q").pack  # fixed64
_D = Struct("<d").pack  # double
_KIND_INTERNAL = b"\x30\x01"  # field 6, varint 1
_FLAGS = b"\x85\x01" + Struct("<I").pack(0x100)  # field 16 fixed32: HAS_IS_REMOTE, not remote
_STATUS_UNSET = b"\x7a\x00"  # field 15, an empty Status


def _ld(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag + varint(len(payload)) + payload


def any_value(v: Any) -> bytes:
    """An AnyValue (string, bool, int, double, or a sequence of those)."""
    if type(v) is str:
        return _ld(b"\x0a", v.encode())
    if type(v) is bool:
        return b"\x10\x01" if v else b"\x10\x00"
    if type(v) is int:
        return b"\x18" + varint(v)
    if type(v) is float:
        return b"\x21" + _D(v)
    if isinstance(v, Sequence) and not isinstance(v, bytes | bytearray):
        return _ld(b"\x2a", b"".join(_ld(b"\x0a", any_value(x)) for x in v))
    return _ld(b"\x0a", str(v).encode())


def key_value(k: str, v: Any) -> bytes:
    return _ld(b"\x0a", k.encode()) + _ld(b"\x12", any_value(v))


def attributes(tag: bytes, attrs: Mapping[str, Any]) -> bytes:
    """Repeated KeyValue under `tag`, uncached (the resource, the scope)."""
    return b"".join(_ld(tag, key_value(k, v)) for k, v in attrs.items())


class Encoder:
    """Encodes batches of SpanRecords under one resource and instrumentation scope. One
    instance per export thread (its cache is not locked).

    The cache of encoded key/value pairs lives for one request: the pairs that repeat do so
    within a batch (the workload, outcomes, a unit's id on each of its spans), and a cache kept
    across requests grows with history (every unit id ever seen), not with what is in flight."""

    def __init__(self, resource: Mapping[str, Any], scope: str, version: str) -> None:
        self.resource = _ld(b"\x0a", attributes(b"\x0a", resource))  # ResourceSpans.resource
        self.scope = _ld(b"\x0a", _ld(b"\x0a", scope.encode()) + _ld(b"\x12", version.encode()))
        self._kv: dict[tuple[str, Any, type], bytes] = {}

    def _attrs(self, tag: bytes, attrs: Mapping[str, Any]) -> bytes:
        cache = self._kv
        out = []
        for k, v in attrs.items():
            if type(v) is list or type(v) is tuple:
                out.append(_ld(tag, key_value(k, v)))
                continue
            ck = (k, v, type(v))  # True and 1 are equal keys, not equal encodings
            b = cache.get(ck)
            if b is None:
                b = cache[ck] = _ld(tag, key_value(k, v))
            out.append(b)
        return b"".join(out)

    def span(self, r: SpanRecord) -> bytes:
        parts = [b"\x0a\x10", r.trace_id.to_bytes(16, "big"),
                 b"\x12\x08", r.span_id.to_bytes(8, "big")]
        if r.parent_id:
            parts += (b"\x22\x08", r.parent_id.to_bytes(8, "big"))
        name = r.name.encode()
        parts += (b"\x2a", varint(len(name)), name, _KIND_INTERNAL,
                  b"\x39", _Q(r.start_ns), b"\x41", _Q(r.end_ns),
                  self._attrs(b"\x4a", r.attributes))
        for ename, ns, eattrs in r.events:
            en = ename.encode()
            ev = b"\x09" + _Q(ns) + b"\x12" + varint(len(en)) + en + self._attrs(b"\x1a", eattrs)
            parts += (b"\x5a", varint(len(ev)), ev)
        if r.error is None:
            parts.append(_STATUS_UNSET)
        else:
            parts.append(_ld(b"\x7a", _ld(b"\x12", r.error.encode()) + b"\x18\x02"))
        parts.append(_FLAGS)
        body = b"".join(parts)
        return b"\x12" + varint(len(body)) + body  # ScopeSpans.spans

    def request(self, records: Iterable[SpanRecord]) -> bytes:
        """One ExportTraceServiceRequest holding `records`."""
        span = self.span
        try:
            scope_spans = _ld(b"\x12", self.scope + b"".join([span(r) for r in records]))
        finally:
            self._kv.clear()
        return _ld(b"\x0a", self.resource + scope_spans)
