"""The live overview as HTML: server-rendered from the same dict `/api/overview` serves."""

from __future__ import annotations

from html import escape
from typing import Any

from exporter import vocabulary
from exporter.overview import svg
from exporter.overview.style import CSS, ICON

REFRESH_S = 15
WORKLOADS_SHOWN = 60  # the slowest first; the JSON has them all
SIGNALS_SHOWN = 20  # per list; the JSON has more
TITLES = {"ready": "readiness", "ack": "allocation ack", "drain": "drain"}


def legend(parts: list[tuple[str, int]]) -> str:
    items = "".join(f'<span><i style="background:{c}"></i>{escape(n)} {v}</span>'
                    for (n, v), c in zip(parts, svg.PALETTE, strict=False))
    return f'<div class="legend">{items}</div>'


def outcome_block(title: str, parts: list[tuple[str, int]]) -> str:
    chart = svg.stacked(parts) or '<p class="nodata">none yet</p>'
    return f'<div class="m"><b>{escape(title)}</b>{chart}{legend(parts)}</div>'


def measurement_block(title: str, m: dict[str, Any], bounds: list[float], window: float) -> str:
    qs = "".join(f'<span>{q} <b style="color:{svg.MARKS[q]}">{svg.fmt_s(m[q])}</b></span>'
                 for q in ("p50", "p95", "p99"))
    hist = svg.histogram(bounds, m["buckets"], {q: m[q] for q in ("p50", "p95", "p99")},
                         label=f"{title}: {m['count']} in the last {window:.0f} s")
    spark = svg.sparkline(m["trend_p95"], label=f"{title} p95 trend")
    body = hist or f'<p class="nodata">no {escape(title)} in the last {window:.0f} s</p>'
    trend = f'<div class="muted">p95 trend {spark}</div>' if spark else ""
    return (f'<div class="m"><b>{escape(title)}</b> <span class="muted">n={m["count"]}</span>'
            f'<div class="q">{qs}</div>{body}{trend}</div>')


def workload_card(w: dict[str, Any], bounds: dict[str, list[float]], window: float) -> str:
    an = w["anomalies"]
    badges = "".join(
        f'<span class="badge{" hot" if an[k] else ""}">{k} {an[k]}</span>'
        for k in ("gaps", "missing", "duplicates", "invalid", "skew"))
    ms = "".join(measurement_block(TITLES[k], w["measurements"][k], bounds[k], window)
                 for k in ("ready", "ack", "drain"))
    wl = escape(w["workload"])
    return (
        f'<section class="card" id="wl-{wl}" data-workload="{wl}"><h3>{wl}</h3>'
        f'<div class="muted">{w["events"]} events, {w["units_tracked"]} units tracked</div>'
        f'{ms}'
        + outcome_block("startups", [(o, w["startups"][o]) for o in vocabulary.STARTUP_OUTCOMES])
        + outcome_block("allocations",
                        [(o, w["allocations"][o]) for o in vocabulary.ALLOCATION_OUTCOMES])
        + f'<div class="m"><b>anomalies</b><div class="badges">{badges}</div></div></section>'
    )


def _worst(w: dict[str, Any]) -> float:
    p95 = w["measurements"]["ready"]["p95"]
    return -(p95 if p95 is not None else -1.0)


def signal_table(rows: list[dict[str, Any]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{escape(empty)}</p>'
    head = ('<colgroup><col style="width:33%"><col style="width:11%"><col style="width:29%">'
            '<col style="width:8%"><col style="width:10%"><col style="width:9%"></colgroup>'
            '<tr><th>namespace/name</th><th>workload</th><th>unit</th>'
            '<th title="generations not observed by the agent">behind</th>'
            '<th title="since the oldest unobserved generation was written">for</th>'
            "<th>spec</th></tr>")
    body = "".join(
        f'<tr data-unitsignal="{escape(r["namespace"])}/{escape(r["name"])}">'
        f'<td><code>{escape(r["namespace"])}/{escape(r["name"])}</code></td>'
        f'<td><a href="#wl-{escape(r["workload"])}">{escape(r["workload"])}</a></td>'
        f'<td><code>{escape(r["unit_id"])}</code></td><td class="n">{r["generation_lag"]}</td>'
        f'<td class="n">{svg.fmt_s(r["unobserved_for_s"])}</td>'
        f'<td>{"valid" if r["spec_valid"] else "<b class=bad>invalid</b>"}</td></tr>'
        for r in rows[:SIGNALS_SHOWN])
    more = (f'<p class="muted">the oldest {SIGNALS_SHOWN} of {len(rows)} shown; '
            'all are in <a href="api/overview">the JSON</a></p>' if len(rows) > SIGNALS_SHOWN
            else "")
    return f"<table>{head}{body}</table>{more}"


def render(data: dict[str, Any], links: dict[str, str]) -> str:
    h = data["exporter"]
    window = data["window_s"]
    ready = '<b class="ok">ready</b>' if h["ready"] else '<b class="bad">not ready</b>'
    nav = " ".join(f'<a href="{escape(u)}">{escape(t)}</a>' for u, t in links.items())
    tiles = [
        ("readiness", f'{ready}<span class="muted">{escape(h["readiness"])}</span>'),
        ("workloads caught up", f'<b>{h["workloads_caught_up"]} / {h["workloads_tailed"]}</b>'),
        ("UnitSignal scopes synced", f'<b>{h["kube_scopes_synced"]} / {h["kube_scopes"]}</b>'),
        ("last scrape", f'<b>{svg.fmt_s(h["last_scrape_age_s"])} ago</b>'
         if h["last_scrape_age_s"] is not None else "<b>never</b>"),
        ("checkpoint age", f'<b>{svg.fmt_s(h["checkpoint_age_s"])}</b>'
         if h["checkpoint_age_s"] is not None else "<b>–</b><span class=muted>none</span>"),
        ("series", f'<b>{h["series"]}</b>'),
    ]
    health = "".join(f'<div><span class="muted">{t}</span>{v}</div>' for t, v in tiles)
    wls = sorted(data["workloads"], key=_worst)
    cards = "".join(workload_card(w, data["bounds"], window) for w in wls[:WORKLOADS_SHOWN])
    more = (f'<p class="muted">{WORKLOADS_SHOWN} of {len(wls)} workloads shown (slowest '
            f'readiness p95 first); all are in <a href="api/overview">the JSON</a>.</p>'
            if len(wls) > WORKLOADS_SHOWN else "")
    us = data["unitsignals"]
    if us["watched"]:
        signals = (
            f'<h2>UnitSignals: oldest unobserved generations <span class="muted">'
            f'({us["lagging"]} of {us["total"]} behind)</span></h2>'
            + signal_table(us["oldest_unobserved"], "every generation observed")
            + f'<h2>Stuck behind an invalid spec <span class="muted">'
            f'({us["stuck_invalid_spec_total"]})</span></h2>'
            + signal_table(us["stuck_invalid_spec"], "none")
        )
    else:
        signals = '<h2>UnitSignals</h2><p class="muted">not watched (no Kubernetes)</p>'
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="refresh" content="{REFRESH_S}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>zaroz exporter overview</title>{ICON}<style>{CSS}</style></head><body>"
        f'<header><h1>zaroz units exporter</h1><span>version {escape(h["version"])}</span>'
        f"<nav>{nav}</nav></header><main>"
        f'<div class="health">{health}</div>'
        f'<h2>Workloads <span class="muted">(worst first: slowest readiness p95; percentiles '
        f"over the last {window:.0f} s, from the exporter's histograms)</span></h2>"
        f'<div class="grid">{cards or "<p class=muted>no workloads yet</p>"}</div>{more}'
        f"{signals}</main></body></html>"
    )
