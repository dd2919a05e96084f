"""Small server-rendered SVG charts: bucket histograms with quantile marks, sparklines, stacked
bars and timeline lanes. Each is a string of inline SVG with `<title>` tooltips; a chart is only
drawn when it has data (the caller prints "no data" instead), so every `svg.chart` shows some.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000")
MARKS = {"p50": "#009E73", "p95": "#E69F00", "p99": "#D55E00"}


def fmt_s(v: float | None) -> str:
    """Seconds for people: 12 ms, 3.4 s, 2.1 min, 1.5 h."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if v < 1:
        return f"{v * 1000:.3g} ms"
    if v < 120:
        return f"{v:.3g} s"
    if v < 7200:
        return f"{v / 60:.3g} min"
    return f"{v / 3600:.3g} h"


def _bucket_pos(v: float, bounds: Sequence[float]) -> float:
    """Where `v` sits on an axis of equal-width buckets (index units)."""
    lo = 0.0
    for i, hi in enumerate(bounds):
        if v <= hi:
            return i + (v - lo) / (hi - lo) if hi > lo else float(i)
        lo = hi
    return float(len(bounds))


def histogram(bounds: Sequence[float], counts: Sequence[int], marks: dict[str, float | None],
              *, width: int = 300, height: int = 80, label: str = "") -> str:
    """Bars per bucket (equal widths: the bounds are roughly logarithmic), quantile lines."""
    n = len(counts)
    top = max(counts) if counts else 0
    if top <= 0:
        return ""
    pad_b, pad_t = 14, 4
    bw = width / n
    ph = height - pad_b - pad_t
    parts = [f'<svg class="chart hist" role="img" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" data-points="{sum(1 for c in counts if c)}">'
             f"<title>{escape(label)}</title>"]
    for i, c in enumerate(counts):
        if not c:
            continue
        h = max(1.0, ph * c / top)
        lo = "0" if i == 0 else fmt_s(bounds[i - 1])
        hi = fmt_s(bounds[i]) if i < len(bounds) else "+Inf"
        parts.append(f'<rect class="bar" x="{i * bw + 1:.1f}" y="{pad_t + ph - h:.1f}" '
                     f'width="{bw - 2:.1f}" height="{h:.1f}" fill="#56B4E9">'
                     f"<title>{lo} – {hi}: {c}</title></rect>")
    for i in range(0, len(bounds), 3):
        parts.append(f'<text x="{(i + 1) * bw:.1f}" y="{height - 3}" font-size="9" '
                     f'text-anchor="middle" fill="#555">{escape(fmt_s(bounds[i]))}</text>')
    for name, v in marks.items():
        if v is None or math.isnan(v):
            continue
        x = min(_bucket_pos(v, bounds), n - 0.01) * bw
        col = MARKS.get(name, "#000")
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{pad_t - 2}" y2="{pad_t + ph}" '
                     f'stroke="{col}" stroke-width="2"><title>{name} {fmt_s(v)}</title></line>')
    parts.append(f'<line x1="0" x2="{width}" y1="{pad_t + ph}" y2="{pad_t + ph}" '
                 f'stroke="#999"/></svg>')
    return "".join(parts)


def sparkline(values: Sequence[float | None], *, width: int = 120, height: int = 24,
              label: str = "") -> str:
    """A line through the known points (None: no data in that step)."""
    pts = [(i, v) for i, v in enumerate(values) if v is not None]
    if len(pts) < 3:  # two points make a slope out of nothing
        return ""
    lo = min(v for _, v in pts)
    hi = max(v for _, v in pts)
    span = hi - lo or 1.0
    dx = (width - 4) / max(1, len(values) - 1)
    coords = " ".join(f"{2 + i * dx:.1f},{height - 2 - (v - lo) / span * (height - 4):.1f}"
                      for i, v in pts)
    return (f'<svg class="chart spark" role="img" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" data-points="{len(pts)}"><title>{escape(label)}: '
            f"{fmt_s(lo)} – {fmt_s(hi)}</title>"
            f'<polyline points="{coords}" fill="none" stroke="#0072B2" stroke-width="1.5"/></svg>')


def stacked(parts: Sequence[tuple[str, int]], *, width: int = 300, height: int = 14,
            colors: Sequence[str] = PALETTE) -> str:
    """One horizontal bar split by value; the legend is the caller's."""
    total = sum(v for _, v in parts)
    if total <= 0:
        return ""
    out = [f'<svg class="chart stack" role="img" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" data-points="{sum(1 for _, v in parts if v)}">']
    x = 0.0
    for (name, v), col in zip(parts, colors, strict=False):
        if not v:
            continue
        w = width * v / total
        out.append(f'<rect class="bar" x="{x:.2f}" y="0" width="{w:.2f}" height="{height}" '
                   f'fill="{col}"><title>{escape(name)}: {v} ({100 * v / total:.1f}%)</title>'
                   "</rect>")
        x += w
    out.append("</svg>")
    return "".join(out)


def lane(segs: Sequence[tuple[float, float, str, str]], span: float, colors: dict[str, str],
         *, width: int = 520, height: int = 16) -> str:
    """One unit's timeline: (start, end, phase, tooltip) segments, seconds from its creation, on
    a scale of `span` seconds shared by the lanes of a table."""
    if not segs or span <= 0:
        return ""
    out = [f'<svg class="chart lane" role="img" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" data-points="{len(segs)}">']
    for a, b, phase, tip in segs:
        x = a / span * width
        w = max(1.5, (b - a) / span * width)
        out.append(f'<rect class="bar" x="{x:.1f}" y="1" width="{w:.1f}" height="{height - 2}" '
                   f'fill="{colors.get(phase, "#999")}"><title>{escape(tip)}</title></rect>')
    out.append("</svg>")
    return "".join(out)


def trend(series: Mapping[str, Sequence[float | None]], colors: dict[str, str], *,
          width: int = 300, height: int = 70, start: str = "", end: str = "") -> str:
    """Lines over equal time bins (None: no observation in the bin), y from 0 to the highest."""
    top = max((v for vs in series.values() for v in vs if v is not None), default=None)
    n = max((len(vs) for vs in series.values()), default=0)
    if top is None or top <= 0 or n < 2:
        return ""
    pad_t, pad_b, pad_l = 4, 13, 44
    ph, pw = height - pad_t - pad_b, width - pad_l - 2
    known = sum(v is not None for vs in series.values() for v in vs)
    out = [f'<svg class="chart trend" role="img" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" data-points="{known}">',
           f'<text x="{pad_l - 3}" y="{pad_t + 8}" font-size="9" text-anchor="end" '
           f'fill="#555">{escape(fmt_s(top))}</text>',
           f'<text x="{pad_l - 3}" y="{pad_t + ph}" font-size="9" text-anchor="end" '
           f'fill="#555">0</text>',
           f'<line x1="{pad_l}" x2="{width}" y1="{pad_t + ph}" y2="{pad_t + ph}" stroke="#999"/>']
    if start:
        out.append(f'<text x="{pad_l}" y="{height - 2}" font-size="9" fill="#555">'
                   f"{escape(start)}</text>")
    if end:
        out.append(f'<text x="{width - 2}" y="{height - 2}" font-size="9" text-anchor="end" '
                   f'fill="#555">{escape(end)}</text>')
    dx = pw / (n - 1)
    for name, vs in series.items():
        pts = [f"{pad_l + i * dx:.1f},{pad_t + ph - v / top * ph:.1f}"
               for i, v in enumerate(vs) if v is not None]
        if len(pts) == 1:
            pts.append(pts[0])
        if pts:
            out.append(f'<polyline points="{" ".join(pts)}" fill="none" '
                       f'stroke="{colors.get(name, "#000")}" stroke-width="1.5">'
                       f"<title>{escape(name)}</title></polyline>")
    out.append("</svg>")
    return "".join(out)
