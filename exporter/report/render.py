"""The incident report as one HTML file: inline CSS and SVG, nothing to fetch, no script."""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left
from datetime import UTC, datetime
from html import escape

from exporter import __version__, vocabulary
from exporter.model.traceids import trace_hex
from exporter.overview import svg
from exporter.overview.history import BOUNDS
from exporter.overview.style import CSS, ICON
from exporter.report.record import Event, ReportMetrics, report_metrics
from exporter.report.summary import ANOMALIES, anomaly_rows, summary_rows
from exporter.timestamps import parse_rfc3339_ns
from exporter.wiring.events import Pipeline

BINS = 24  # time bins of the trend charts
ANOMALIES_SHOWN = 1000  # rows per workload in the page; counts are exact
ANOMALIES_OPEN = 25  # more than this: the list starts folded
TITLES = {"ready": "readiness", "allocation_ack": "allocation ack", "drain": "drain"}
BOUNDS_OF = {"ready": BOUNDS["ready"], "allocation_ack": BOUNDS["ack"], "drain": BOUNDS["drain"]}
TREND_COLORS = {"p50": svg.MARKS["p50"], "p95": svg.MARKS["p95"]}
PHASE_OF = {
    "unit.created": "starting", "unit.starting": "starting", "unit.ready": "ready",
    "unit.accepting": "ready", "unit.idle": "ready", "unit.allocation_undelivered": "ready",
    "unit.not_accepting": "not accepting", "unit.allocated": "allocating",
    "unit.allocation_delivered": "allocated", "unit.busy": "busy", "unit.draining": "draining",
    "unit.exited": "exited", "unit.stopped": "stopped", "unit.failed": "failed",
}
PHASE_COLORS = {
    "starting": "#E69F00", "ready": "#56B4E9", "not accepting": "#BBBBBB",
    "allocating": "#CC79A7", "allocated": "#0072B2", "busy": "#009E73", "draining": "#D55E00",
    "exited": "#555555", "stopped": "#555555", "failed": "#B42318",
}

EXTRA_CSS = """
.wl{background:#fff;border:1px solid #ddd;border-radius:8px;padding:10px 14px;margin:14px 0}
.wl h2{margin-top:4px}
.cols{display:grid;grid-template-columns:repeat(auto-fill,minmax(320px,1fr));gap:12px}
td.lane{padding:2px 8px}
svg.trend,svg.lane{width:100%}
code.trace,tr[data-unit] code{font-size:11px}
"""


def _ns(at: str) -> int | None:
    """Event time in ns; the C parser first (microseconds are plenty for charts), the model's
    own for the forms it does not take."""
    try:
        dt = datetime.fromisoformat(at)
        if dt.tzinfo is not None:
            return int(dt.timestamp() * 1_000_000) * 1000
    except (ValueError, TypeError):
        pass
    try:
        return parse_rfc3339_ns(at)
    except (ValueError, TypeError):
        return None


def _nearest(xs: list[int], q: float) -> float | None:
    if not xs:
        return None
    return xs[max(0, math.ceil(q * len(xs)) - 1)] / 1e9


def _bucket_counts(xs: list[int], bounds: tuple[float, ...]) -> list[int]:
    edges = [round(b * 1e9) for b in bounds]
    counts = [0] * (len(edges) + 1)
    for x in xs:
        counts[bisect_left(edges, x)] += 1
    return counts


def _trend(points: list[tuple[int, str, str]], t0: int, t1: int) -> dict[str, list[float | None]]:
    """p50 and p95 in BINS equal spans of event time. Points are in the log's order, which is
    time order near enough for a chart, so each bin edge is found by bisection: a few dozen
    timestamps parsed per chart instead of every one."""
    span = max(1, t1 - t0)

    def time_of(p: tuple[int, str, str]) -> int:
        return _ns(p[1]) or t0

    edges = [bisect_left(points, t0 + span * k // BINS, key=time_of) for k in range(1, BINS)]
    out: dict[str, list[float | None]] = {"p50": [], "p95": []}
    for a, b in itertools.pairwise([0, *edges, len(points)]):
        xs = sorted(p[0] for p in points[a:b])
        out["p50"].append(_nearest(xs, 0.5))
        out["p95"].append(_nearest(xs, 0.95))
    return out


def _clock(ns: int | None) -> str:
    if ns is None:
        return "?"
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _segments(evs: list[Event]) -> tuple[list[tuple[float, float, str, str]], float]:
    """A unit's events as phase segments, seconds from its first event; and its length."""
    parsed = [(_ns(at), t, seq) for at, t, seq in evs]
    times = [(n, t, seq) for n, t, seq in parsed if n is not None]
    if not times:
        return [], 0.0
    start = times[0][0]
    segs = []
    for (a, t, seq), nxt in zip(times, [*times[1:], None], strict=True):
        b = nxt[0] if nxt is not None else a
        phase = PHASE_OF.get(t)
        if phase is None:
            continue
        tip = f"{phase}: {t} at +{svg.fmt_s((a - start) / 1e9)} (seq {seq})"
        segs.append(((a - start) / 1e9, max(a, b - 0) / 1e9 - start / 1e9, phase, tip))
    return segs, (times[-1][0] - start) / 1e9


def _slowest(wl: str, obs: ReportMetrics) -> str:
    tl = obs.timelines
    order: list[str] = []
    for m in ("ready", "drain"):
        for _, uid in tl.slowest(m):
            if uid not in order and uid in tl.kept:
                order.append(uid)
    if not order:
        return '<p class="muted">no unit with a measured readiness or drain</p>'
    ready = {u: ns for ns, u in tl.heaps["ready"]}
    drain = {u: ns for ns, u in tl.heaps["drain"]}
    lanes = {u: _segments(tl.kept[u]) for u in order}
    span = max((length for _, length in lanes.values()), default=0.0) or 1.0
    rows = []
    for u in order:
        segs, length = lanes[u]
        chart = svg.lane(segs, span, PHASE_COLORS) or '<span class="nodata">one event</span>'
        rows.append(
            f'<tr data-unit="{escape(u)}" data-ready-ns="{ready.get(u, "")}">'
            f'<td><code>{escape(u)}</code></td>'
            f'<td><code class="trace">{trace_hex(wl, u)}</code></td>'
            f'<td class="n">{svg.fmt_s(ready[u] / 1e9) if u in ready else "–"}</td>'
            f'<td class="n">{svg.fmt_s(drain[u] / 1e9) if u in drain else "–"}</td>'
            f'<td class="n">{svg.fmt_s(length)}</td><td class="lane">{chart}</td></tr>')
    legend = "".join(f'<span><i style="background:{c}"></i>{escape(p)}</span>'
                     for p, c in PHASE_COLORS.items() if p not in ("stopped",))
    return (f'<div class="legend">{legend}</div>'
            '<table><colgroup><col style="width:17%"><col style="width:23%">'
            '<col style="width:7%"><col style="width:7%"><col style="width:7%">'
            '<col style="width:39%"></colgroup><tr><th>unit</th><th>trace id</th>'
            '<th>ready</th><th>drain</th><th title="first to last event">life</th>'
            f"<th>timeline (same scale, from its first event; 0 – {svg.fmt_s(span)})</th></tr>"
            + "".join(rows) + "</table>")


def _anomalies(obs: ReportMetrics, counts: tuple[str, ...]) -> str:
    names = [a for a, _ in ANOMALIES]
    head = "".join(f'<span class="badge{" hot" if c != "0" else ""}" data-count="{escape(n)}">'
                   f"{escape(n)} {c}</span>"
                   for n, c in zip(names, counts[2:], strict=False))
    head += f'<span class="badge">unknown types {counts[-1]}</span>'
    if not obs.anomalies:
        return f'<div class="badges">{head}</div><p class="muted">none</p>'
    rows = "".join(
        f'<tr class="anomaly" data-kind="{escape(k)}"><td>{escape(k)}</td>'
        f"<td><code>{escape(f)}{f':{line}' if line else ''}</code></td>"  # 0: no line read
        f"<td><code>{'–' if seq is None else escape(str(seq))}</code></td>"
        f"<td>{escape(what)}</td></tr>"
        for k, f, line, seq, what in obs.anomalies[:ANOMALIES_SHOWN])
    more = len(obs.anomalies) - ANOMALIES_SHOWN
    note = (f'<p class="muted">{more} more recorded (and counts above are exact)</p>'
            if more > 0 else "")
    n = len(obs.anomalies)
    return (f'<div class="badges">{head}</div>'
            f'<details{" open" if n <= ANOMALIES_OPEN else ""}><summary>{n} recorded, '
            "where each was read</summary>"
            '<table><colgroup><col style="width:14%">'
            '<col style="width:28%"><col style="width:18%"><col style="width:40%"></colgroup>'
            "<tr><th>kind</th><th>file:line</th><th>seq</th><th>what</th></tr>"
            f"{rows}</table>{note}</details>")


def _outcomes(pipeline: Pipeline, wl: str) -> str:
    reg = pipeline.registry
    out = []
    for title, name, outcomes in (
            ("startups", "zaroz_unit_startups_total", vocabulary.STARTUP_OUTCOMES),
            ("allocations", "zaroz_unit_allocations_total", vocabulary.ALLOCATION_OUTCOMES)):
        fam = reg.counter(name)
        parts = [(o, int(fam.series[(wl, o)].value) if (wl, o) in fam.series else 0)
                 for o in outcomes]
        chart = svg.stacked(parts) or '<p class="nodata">none</p>'
        legend = "".join(f'<span><i style="background:{c}"></i>{escape(n)} {v}</span>'
                         for (n, v), c in zip(parts, svg.PALETTE, strict=False))
        out.append(f'<div class="m"><b>{title}</b>{chart}<div class="legend">{legend}</div></div>')
    return "".join(out)


def render(pipeline: Pipeline, files: list[str]) -> str:
    numbers = summary_rows(pipeline)
    counts = {r[0]: r for r in anomaly_rows(pipeline)}
    sections = []
    for wl, log in pipeline.logs.items():
        obs = report_metrics(log)
        ats = [_ns(at) for m in obs.points.values() for _, at, _ in (m[0], m[-1]) if m]
        known = [t for t in ats if t is not None]
        t0, t1 = (min(known), max(known)) if known else (0, 0)
        table = "".join(
            f'<tr class="numbers" data-workload="{escape(r[0])}" data-measurement="{r[1]}">'
            f'<td>{TITLES[r[1]]}</td><td class="n" data-k="count">{r[2]}</td>'
            + "".join(f'<td class="n" data-k="{q}">{v}</td>'
                      for q, v in zip(("p50", "p95", "p99"), r[3:], strict=True))
            + "</tr>" for r in numbers if r[0] == wl)
        charts = []
        for m in ("ready", "allocation_ack", "drain"):
            xs = sorted(ns for ns, _, _ in obs.points.get(m, ()))
            marks = {q: _nearest(xs, p) for q, p in (("p50", .5), ("p95", .95), ("p99", .99))}
            hist = svg.histogram(BOUNDS_OF[m], _bucket_counts(xs, BOUNDS_OF[m]), marks,
                                 label=f"{TITLES[m]}: {len(xs)}")
            tr = svg.trend(_trend(obs.points.get(m, []), t0, t1), TREND_COLORS,
                           start=_clock(t0)[11:], end=_clock(t1)[11:])
            qs = "".join(f'<span>{q} <b style="color:{svg.MARKS[q]}">{svg.fmt_s(v)}</b></span>'
                         for q, v in marks.items())
            charts.append(
                f'<div class="m"><b>{TITLES[m]}</b> <span class="muted">n={len(xs)}</span>'
                f'<div class="q">{qs}</div>'
                + (hist or '<p class="nodata">no observations</p>')
                + (f'<div class="muted">p50 and p95 over the log</div>{tr}' if tr else "")
                + "</div>")
        wle = escape(wl)
        sections.append(
            f'<section class="wl" id="wl-{wle}" data-workload="{wle}"><h2>{wle}</h2>'
            f'<div class="muted">{counts[wl][1]} events, {_clock(t0)} – {_clock(t1)} UTC '
            f"(the measured intervals' ends)</div>"
            '<table><colgroup><col style="width:28%"><col><col><col><col></colgroup>'
            "<tr><th>measurement</th><th>count</th><th>p50 s</th><th>p95 s</th><th>p99 s</th>"
            f"</tr>{table}</table>"
            f'<div class="cols">{"".join(charts)}<div>{_outcomes(pipeline, wl)}</div></div>'
            f"<h3>Slowest units</h3>{_slowest(wl, obs)}"
            f"<h3>Anomalies</h3>{_anomalies(obs, counts[wl])}</section>")
    flist = ", ".join(f"<code>{escape(f)}</code>" for f in files)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>zaroz replay report</title>{ICON}<style>{CSS}{EXTRA_CSS}</style></head><body>"
        f"<header><h1>zaroz replay report</h1><span>exporter {escape(__version__)}</span>"
        f"</header><main><p>Replayed {flist}. Percentiles are exact (nearest rank), as "
        "<code>replay --summary</code> prints them; histograms use the metrics' buckets.</p>"
        + "".join(sections) + "</main></body></html>")
