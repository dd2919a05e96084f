"""Prometheus text 0.0.4, OpenMetrics 1.0 and protobuf rendering of a registry, and the choice
between them by the scrape's Accept header. `protobuf.py` encodes (it knows no registry), so the
modules of sinks/metrics import one way: series, protobuf <- table <- family <- exposition.

Sample lines are the same in both formats for what we expose (counters keep `_total` on the
sample, histograms and gauges are identical); only family headers, the `# EOF` trailer and the
headline histograms' exemplars (OpenMetrics only: text-format parsers reject them) differ, so each
series is rendered once and serves both formats, plus an OpenMetrics render where it has
exemplars.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum

from exporter.catalog import Kind, Metric
from exporter.sinks.metrics import protobuf
from exporter.sinks.metrics.family import Registry
from exporter.sinks.varint import varint

TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
PROTOBUF_TYPE = protobuf.PROTOBUF_TYPE


class Format(StrEnum):
    TEXT = "text"
    OPENMETRICS = "openmetrics"
    PROTOBUF = "protobuf"


CONTENT_TYPES = {Format.TEXT: TEXT_TYPE, Format.OPENMETRICS: OPENMETRICS_TYPE,
                 Format.PROTOBUF: PROTOBUF_TYPE}


def negotiate(accept: str | None) -> Format:
    """The format the Accept header prefers (highest q, first on ties); text when none fits.
    Protobuf only as delimited MetricFamily messages, what Prometheus asks for when its native
    histograms are on."""
    if not accept:
        return Format.TEXT
    best_q, best = -1.0, Format.TEXT
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        mtype, q, params = fields[0].lower(), 1.0, {}
        for f in fields[1:]:
            k, _, v = f.partition("=")
            params[k.strip().lower()] = v.strip().strip('"')
        try:
            q = float(params.get("q", 1.0))
        except ValueError:
            q = 0.0
        fmt = None
        if mtype == "application/openmetrics-text":
            fmt = Format.OPENMETRICS
        elif mtype in ("text/plain", "*/*", "text/*"):
            fmt = Format.TEXT
        elif (mtype == "application/vnd.google.protobuf"
              and params.get("proto") == "io.prometheus.client.MetricFamily"
              and params.get("encoding") == "delimited"):
            fmt = Format.PROTOBUF
        if fmt is not None and q > best_q:
            best_q, best = q, fmt
    return best


def _escape_help(h: str) -> str:
    return h.replace("\\", "\\\\").replace("\n", "\\n")


def header(m: Metric, openmetrics: bool) -> bytes:
    if openmetrics:
        lines = [
            f"# TYPE {m.family} {m.kind.value}\n",
            f"# HELP {m.family} {_escape_help(m.help)}\n",
        ]
        if m.unit and m.family.endswith("_" + m.unit):
            lines.append(f"# UNIT {m.family} {m.unit}\n")
    else:
        kind = "gauge" if m.kind is Kind.INFO else m.kind.value
        lines = [f"# HELP {m.name} {_escape_help(m.help)}\n", f"# TYPE {m.name} {kind}\n"]
    return "".join(lines).encode()


def render(registry: Registry, openmetrics: bool | Format = False) -> Iterator[bytes]:
    """The exposition in pieces, one family at a time (`openmetrics`: True/False, or a Format)."""
    if openmetrics is Format.PROTOBUF:
        yield from render_protobuf(registry)
        return
    om = openmetrics is True or openmetrics is Format.OPENMETRICS
    # per-object tables: no exemplars, the same lines in both formats
    for metric, pieces in registry.rendered(lambda f: f.body(om), lambda t: t.pieces(),
                                            lambda x: x.render(om)):
        if metric is not None:
            yield header(metric, om)
        yield from pieces
    if om:
        yield b"# EOF\n"


def render_bytes(registry: Registry, openmetrics: bool | Format = False) -> bytes:
    return b"".join(render(registry, openmetrics))


def render_protobuf(registry: Registry) -> Iterator[bytes]:
    """The protobuf exposition in pieces: each family's length prefix and header, then its
    metrics (tables by chunk, not joined, as in text), timed as the text render is
    (Registry.rendered). Families without series are left out (a MetricFamily must hold a
    metric). The extras (prometheus_client's process collectors) are transcoded from their
    text."""
    for metric, pieces in registry.rendered(
            lambda f: f.pb_body(), lambda t: t.pb_pieces(),
            lambda x: protobuf.transcode_families(x.render(False))):
        if metric is None:
            yield from pieces
            continue
        size = sum(map(len, pieces))
        if size:
            head = protobuf.family_header(metric)
            yield varint(len(head) + size) + head
            yield from pieces


WRITE_SIZE = 65536


def coalesce(chunks: list[bytes], size: int = WRITE_SIZE) -> Iterator[bytes]:
    """The exposition's pieces joined into writes of about `size` bytes: one write per piece
    would cost an await each (~80k pieces at 100k UnitSignals), one join of all a copy of the
    whole exposition; groups this small are freed and reused as they go."""
    group: list[bytes] = []
    held = 0
    for chunk in chunks:
        if len(chunk) >= size:
            if group:
                yield b"".join(group)
                group, held = [], 0
            yield chunk
            continue
        group.append(chunk)
        held += len(chunk)
        if held >= size:
            yield b"".join(group)
            group, held = [], 0
    if group:
        yield b"".join(group)
