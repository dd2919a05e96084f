"""The protobuf exposition: delimited `io.prometheus.client.MetricFamily` messages.

Hand-encoded: the wire format needs only varints, doubles and length prefixes, and no well-kept
PyPI package ships the messages (prometheus-client-model and prometheus-metrics-proto are years
old and predate native histograms); generated code would also build a message object per sample
where we join cached bytes. tests/test_protobuf.py decodes the output with the official
`protobuf` runtime against the messages of client_model's metrics.proto.

Like the text path, each series keeps its encoded `Metric` (field 4 of its family, ready to
join) and re-encodes it only when it changed; per-object tables render each changed chunk's rows
straight to `Metric` fields with their columns' `pb` renderers (`metric_fields`; a column without
one has its text transcoded, `transcode_lines`).
"""

from __future__ import annotations

import functools
import re
import struct

from exporter.catalog import Kind, Metric
from exporter.sinks.metrics.native import ZERO_THRESHOLD
from exporter.sinks.metrics.series import (
    Exemplar,
    HistogramSeries,
    Series,
    exemplar_labels,
    exemplar_time,
)
from exporter.sinks.varint import SMALL, VARINTS, varint

PROTOBUF_TYPE = ("application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
                 "encoding=delimited")

# MetricType enum values.
_TYPES = {Kind.COUNTER: 0, Kind.GAUGE: 1, Kind.INFO: 1, Kind.HISTOGRAM: 4}
_pack_double = struct.Struct("<d").pack


def zigzag(n: int) -> int:
    return n << 1 if n >= 0 else (-n << 1) - 1


def field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: its tag byte (field number << 3 | 2), length and payload."""
    return SMALL[tag] + varint(len(payload)) + payload


@functools.lru_cache(maxsize=1024)
def _label_names(names: tuple[str, ...]) -> tuple[bytes, ...]:
    """Per label name: LabelPair.name and the tag of LabelPair.value, encoded once."""
    return tuple(field(0x0A, n.encode()) + b"\x12" for n in names)


def label_pairs(names: tuple[str, ...], values: tuple[str, ...]) -> bytes:
    """Metric.label (field 1), one LabelPair each."""
    parts = []
    for nf, v in zip(_label_names(names), values, strict=True):
        ve = v.encode()
        n = len(ve)
        if n + len(nf) < 127:  # nearly always: both lengths fit one byte
            parts.append(b"\x0a" + SMALL[len(nf) + 1 + n] + nf + SMALL[n] + ve)
        else:
            parts.append(field(0x0A, nf + varint(n) + ve))
    return b"".join(parts)


def rescale(old: bytes, v: float) -> bytes:
    """A counter or gauge Metric encoded by `scalar_metric` with a new value: its double is the
    last 8 bytes, so a change costs a slice (what keeps a 1% change cheap at 1M series)."""
    return old[:-8] + _pack_double(v)


def _value(tag: int, v: float) -> bytes:
    """A Gauge/Counter/Untyped message (field 1: double) as field `tag` of Metric."""
    return SMALL[tag] + b"\x09\x09" + _pack_double(v)


def scalar_metric(kind: Kind, labels: bytes, v: float) -> bytes:
    """A counter or gauge series as MetricFamily.metric (field 4)."""
    return field(0x22, labels + _value(0x1A if kind is Kind.COUNTER else 0x12, v))


def _exemplar(e: Exemplar) -> bytes:
    ns, at = e[2], e[3]
    msg = b"".join([field(0x0A, field(0x0A, k.encode()) + field(0x12, v.encode()))
                    for k, v in exemplar_labels(e)])
    msg += b"\x11" + _pack_double(ns / 1e9)
    if at and (t := exemplar_time(at)) is not None:
        s, frac = t
        msg += field(0x1A, b"\x08" + varint(s) + (b"\x10" + varint(frac) if frac else b""))
    return msg


def histogram_metric(labels: bytes, s: HistogramSeries) -> bytes:
    """A histogram series: count, sum, the classic cumulative buckets (the +Inf one implied by
    the count, as client_golang does) with their exemplars, and the native buckets if any."""
    h = [b"\x08", varint(s.count), b"\x11", _pack_double(s.sum_ns / 1e9)]
    acc = 0
    ex = s.ex
    for i, ub in enumerate(s.family.metric.buckets):
        acc += s.counts[i]
        b = b"\x08" + varint(acc) + b"\x11" + _pack_double(ub)
        if ex is not None and (e := ex[i]) is not None:
            b += field(0x1A, _exemplar(e))
        h.append(field(0x1A, b))
    nb = s.native
    if nb is not None:
        h += [b"\x28", varint(zigzag(nb.schema)), b"\x31", _pack_double(ZERO_THRESHOLD),
              b"\x38", varint(nb.zero_count)]
        spans, deltas = nb.spans()
        for off, n in spans:
            h.append(field(0x62, b"\x08" + varint(zigzag(off)) + b"\x10" + varint(n)))
        if deltas:
            h.append(field(0x6A, b"".join([varint(zigzag(d)) for d in deltas])))
    return field(0x22, labels + field(0x3A, b"".join(h)))


def series_metric(m: Metric, values: tuple[str, ...], s: Series | HistogramSeries) -> bytes:
    labels = label_pairs(m.labels, values)
    if isinstance(s, HistogramSeries):
        return histogram_metric(labels, s)
    return scalar_metric(m.kind, labels, s.value)


def gauge_value(v: float) -> bytes:
    """Metric.gauge holding `v`: what follows a gauge row's labels."""
    return b"\x12\x09\x09" + _pack_double(v)


GAUGE_ONE = gauge_value(1.0)
_GAUGE_INTS = {i: gauge_value(float(i)) for i in range(-1, 1024)}


def gauge_int(v: int) -> bytes:
    """`gauge_value` of an integer state field, cached for the usual small ones."""
    enc = _GAUGE_INTS.get(v)
    return enc if enc is not None else gauge_value(float(v))


def metric_fields(msgs: list[bytes]) -> bytes:
    """Metric messages (labels + value) as MetricFamily.metric fields, joined."""
    v = VARINTS
    return b"".join([b"\x22" + v[len(m)] + m if len(m) < 16384 else field(0x22, m)
                     for m in msgs])


def family_header(m: Metric) -> bytes:
    """MetricFamily name, help and type: the sample name is the family name, as in text."""
    return field(0x0A, m.name.encode()) + field(0x12, m.help.encode()) + b"\x18" + \
        varint(_TYPES[m.kind])


# -- text label blocks as LabelPair fields (the tables' row labels, the extras' samples) --------

_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')
_UNESCAPE = re.compile(r"\\(.)")
# `name="value"` -> its encoded LabelPair field: label values repeat across a table's families
# and, for live columns, across scrapes. Cleared when full, so it stays bounded.
_PAIRS: dict[str, bytes] = {}
_PAIRS_MAX = 1 << 15


def _unescape(v: str) -> str:
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), v)


def _pair(text: str) -> bytes:
    """`name="value"` (no backslash in it) as Metric.label's LabelPair field."""
    enc = _PAIRS.get(text)
    if enc is None:
        name, _, value = text.partition('="')
        enc = label_pairs((name,), (value[:-1],))
        if len(_PAIRS) >= _PAIRS_MAX:
            _PAIRS.clear()
        _PAIRS[text] = enc
    return enc


def encode_labels(block: str) -> bytes:
    """The inside of a text label block (`a="x",b="y"`) as Metric.label fields."""
    # Nearly always no backslash: then no value holds a quote, so `",` splits pairs, unless a
    # value starts with a comma (`="` then `,`; the regex below reads those).
    if "\\" not in block and '=",' not in block:
        parts = block.split('",')
        last = len(parts) - 1
        return b"".join([_pair(p if i == last else p + '"') for i, p in enumerate(parts)])
    found = _LABEL.findall(block)
    return label_pairs(tuple(n for n, _ in found), tuple(_unescape(v) for _, v in found))


# prometheus_client's family types -> MetricType, and the Metric field of their values.
_PARSED_TYPES = {"counter": (0, 0x1A), "gauge": (1, 0x12), "info": (1, 0x12),
                 "untyped": (3, 0x2A), "unknown": (3, 0x2A)}


def transcode_families(text: bytes) -> bytes:
    """A whole text exposition of counters, gauges and untyped samples (the standard process
    metrics) as delimited MetricFamily messages, one per sample name."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for fam in text_string_to_metric_families(text.decode()):
        mtype, tag = _PARSED_TYPES.get(fam.type, (3, 0x2A))
        by_name: dict[str, list[bytes]] = {}
        for smp in fam.samples:
            names = tuple(smp.labels)
            labels = label_pairs(names, tuple(smp.labels[n] for n in names))
            kind_tag = tag if smp.name.endswith("_total") or fam.type != "counter" else 0x2A
            by_name.setdefault(smp.name, []).append(
                field(0x22, labels + SMALL[kind_tag] + b"\x09\x09" + _pack_double(smp.value)))
        for name, metrics in by_name.items():
            t = mtype if not (fam.type == "counter" and not name.endswith("_total")) else 3
            head = field(0x0A, name.encode()) + field(0x12, fam.documentation.encode()) + \
                b"\x18" + varint(t)
            body = b"".join(metrics)
            out.append(varint(len(head) + len(body)) + head + body)
    return b"".join(out)
