"""Prometheus text 0.0.4 and OpenMetrics 1.0 rendering of a registry.

Sample lines are the same in both formats for what we expose (counters keep `_total` on the
sample, histograms and gauges are identical); only family headers, the `# EOF` trailer and the
headline histograms' exemplars (OpenMetrics only: text-format parsers reject them) differ, so each
series is rendered once and serves both formats, plus an OpenMetrics render where it has
exemplars.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from exporter.catalog import Kind, Metric
from exporter.sinks.metrics.family import Family, Registry

PROCESS = "process"  # the source of the registry's extras (the process_* and python_* families)
TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def wants_openmetrics(accept: str | None) -> bool:
    """True when the Accept header prefers OpenMetrics (Prometheus sends it first when enabled)."""
    if not accept:
        return False
    best_q, best_om = -1.0, False
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        mtype, q = fields[0].lower(), 1.0
        for f in fields[1:]:
            if f.startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
        if mtype == "application/openmetrics-text" and q > best_q:
            best_q, best_om = q, True
        elif mtype in ("text/plain", "*/*", "text/*") and q > best_q:
            best_q, best_om = q, False
    return best_om


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


def render(registry: Registry, openmetrics: bool = False) -> Iterator[bytes]:
    """The exposition in pieces, one family at a time."""
    seconds = registry.render_seconds
    seconds.clear()
    clock = time.perf_counter
    for fam in registry.visible():
        t = clock()
        if isinstance(fam, Family):
            body = fam.body(openmetrics)
            pieces = [body] if body else []
        else:  # per-object tables: no exemplars, the same lines in both formats; not joined
            pieces = fam.pieces()
        group = fam.metric.group
        seconds[group] = seconds.get(group, 0.0) + clock() - t
        yield header(fam.metric, openmetrics)
        yield from pieces
    for extra in registry.extras:
        t = clock()
        body = extra.render(openmetrics)
        seconds[PROCESS] = seconds.get(PROCESS, 0.0) + clock() - t
        yield body
    if openmetrics:
        yield b"# EOF\n"


def render_bytes(registry: Registry, openmetrics: bool = False) -> bytes:
    return b"".join(render(registry, openmetrics))


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
