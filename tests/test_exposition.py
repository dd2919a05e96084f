"""The exposition: both formats, negotiation, incremental rendering, and promtool on real output."""

from __future__ import annotations

import subprocess

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.catalog import Kind, Metric
from exporter.sinks.metrics.exposition import Format, negotiate, render_bytes
from exporter.sinks.metrics.family import Registry
from exporter.wiring.events import Pipeline
from tests.components import require
from tests.envelopes import Log


def small_registry() -> Registry:
    return Registry(
        [
            Metric("t_events_total", Kind.COUNTER, "Events.", ("workload",)),
            Metric("t_level", Kind.GAUGE, "A level.", ("workload",)),
            Metric("t_wait_seconds", Kind.HISTOGRAM, "Waits.", ("workload",), (0.1, 1.0),
                   "seconds"),
            Metric("t_build_info", Kind.INFO, "Build.", ("version",)),
        ]
    )


def samples(text: str, om: bool = False) -> dict[tuple[str, tuple], float]:
    fams = parse_openmetrics(text) if om else parse_text(text)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in fams for s in f.samples}


def test_text_format_renders_every_kind():
    r = small_registry()
    r["t_events_total"].labels("a").inc(3)
    r["t_level"].labels("a").set(2.5)
    h = r["t_wait_seconds"].labels("a")
    for ns in (50_000_000, 100_000_000, 100_000_001, 5 * 10**9):
        h.observe_ns(ns)
    r["t_build_info"].labels("1.0").set(1)
    text = render_bytes(r).decode()
    got = samples(text)
    assert got[("t_events_total", (("workload", "a"),))] == 3
    assert got[("t_level", (("workload", "a"),))] == 2.5
    # le is inclusive: exactly 0.1 s falls in the 0.1 bucket.
    assert got[("t_wait_seconds_bucket", (("le", "0.1"), ("workload", "a")))] == 2
    assert got[("t_wait_seconds_bucket", (("le", "1"), ("workload", "a")))] == 3
    assert got[("t_wait_seconds_bucket", (("le", "+Inf"), ("workload", "a")))] == 4
    assert got[("t_wait_seconds_sum", (("workload", "a"),))] == pytest.approx(5.250000001)
    assert got[("t_wait_seconds_count", (("workload", "a"),))] == 4
    assert "# TYPE t_build_info gauge" in text
    assert "# EOF" not in text


def test_openmetrics_format_is_accepted_by_the_strict_parser():
    r = small_registry()
    r["t_events_total"].labels("a").inc()
    r["t_wait_seconds"].labels("a").observe_ns(10)
    r["t_build_info"].labels("1.0").set(1)
    text = render_bytes(r, openmetrics=True).decode()
    assert text.endswith("# EOF\n")
    assert "# TYPE t_events counter" in text
    assert "# TYPE t_build info" in text
    assert "# UNIT t_wait_seconds seconds" in text
    got = samples(text, om=True)
    assert got[("t_events_total", (("workload", "a"),))] == 1
    assert got[("t_build_info", (("version", "1.0"),))] == 1


def test_label_values_are_escaped():
    r = small_registry()
    r["t_level"].labels('we"ird\\name\nx').set(1)
    got = samples(render_bytes(r).decode())
    assert got[("t_level", (("workload", 'we"ird\\name\nx'),))] == 1


def test_only_changed_series_are_rendered_again():
    r = small_registry()
    a = r["t_events_total"].labels("a")
    b = r["t_events_total"].labels("b")
    render_bytes(r)
    line_b = b.line
    a.inc()
    assert a.line is None and b.line is line_b
    assert samples(render_bytes(r).decode())[("t_events_total", (("workload", "a"),))] == 1
    assert b.line is line_b


def test_callback_series_are_read_at_scrape_time():
    r = small_registry()
    box = [1.0]
    r["t_level"].callback(("a",), lambda: box[0])
    assert samples(render_bytes(r).decode())[("t_level", (("workload", "a"),))] == 1
    box[0] = 7
    assert samples(render_bytes(r).decode())[("t_level", (("workload", "a"),))] == 7


def test_removed_series_leave_the_exposition():
    r = small_registry()
    r["t_level"].labels("a").set(1)
    r["t_level"].labels("b").set(2)
    render_bytes(r)
    r["t_level"].remove("a")
    got = samples(render_bytes(r).decode())
    assert ("t_level", (("workload", "a"),)) not in got
    assert got[("t_level", (("workload", "b"),))] == 2


@pytest.mark.parametrize(
    ("accept", "om"),
    [
        (None, False),
        ("text/plain", False),
        ("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
         True),
        ("application/openmetrics-text; version=0.0.1; q=0.3, text/plain; q=0.9", False),
        ("*/*", False),
    ],
)
def test_accept_negotiation(accept, om):
    assert (negotiate(accept) is Format.OPENMETRICS) is om


def _replayed_exposition(openmetrics: bool = False) -> bytes:
    log = Log()
    for i in range(5):
        u = f"u{i}"
        log.add("unit.created", unit=u, at_ms=i * 1000)
        log.add("unit.ready", unit=u, at_ms=i * 1000 + 300)
        log.add("unit.allocated", unit=u, at_ms=i * 1000 + 400)
        log.add("unit.allocation_delivered", unit=u, at_ms=i * 1000 + 420)
        log.add("unit.draining", unit=u, at_ms=i * 1000 + 500, data={"reason": "scale_down"})
        log.add("unit.exited", unit=u, at_ms=i * 1000 + 700, data={"code": 143, "restarted": False})
        log.add("unit.destroyed", unit=u, at_ms=i * 1000 + 800)
    log.add("units.scaled", unit=None, data={"from": 5, "to": 0, "reason": "policy"})
    p = Pipeline()
    wl = p.workload("wl-1")
    for ev in log.events:
        wl.offer(ev)
    wl.reject_json()
    return render_bytes(p.registry, openmetrics)


def test_promtool_accepts_real_output():
    promtool = require("promtool")
    body = _replayed_exposition()
    assert b"zaroz_unit_drain_seconds_count" in body
    res = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True)
    assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()
    # promtool must be able to fail: a counter without _total is a lint problem.
    bad = body + b"# HELP bad_counter x\n# TYPE bad_counter counter\nbad_counter 1\n"
    res = subprocess.run([promtool, "check", "metrics"], input=bad, capture_output=True)
    assert res.returncode != 0


def test_replayed_openmetrics_parses():
    got = samples(_replayed_exposition(openmetrics=True).decode(), om=True)
    assert got[("zaroz_unit_drain_seconds_count", (("reason", "scale_down"),
                                                   ("workload", "wl-1")))] == 5
    assert got[("zaroz_workload_desired_units", (("workload", "wl-1"),))] == 0
    assert got[("zaroz_unit_exits_total", (("code", "143"), ("restarted", "false"),
                                           ("workload", "wl-1")))] == 5


def test_writes_are_coalesced_pieces_in_order_and_bounded():
    import random

    from exporter.sinks.metrics.exposition import coalesce

    rng = random.Random(3)
    pieces = [bytes([65 + i % 26]) * rng.choice((1, 50, 3000)) for i in range(2000)]
    pieces[700] = pieces[1500] = b"x" * 70000  # a piece above the size goes out alone
    groups = list(coalesce(pieces, 65536))
    assert b"".join(groups) == b"".join(pieces)
    assert all(65536 <= len(g) < 65536 + 3000 for g in groups[:3])
    assert all(len(g) < 65536 + 3000 or g == pieces[700] for g in groups)
    assert len(groups) <= sum(map(len, pieces)) // 65536 + 4  # joined, not a write a piece
    assert list(coalesce([], 10)) == []
