"""Exemplars on the headline histograms: OpenMetrics only, the unit's trace id and the id of the
span measured, the event time."""

from __future__ import annotations

import subprocess

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.model.traceids import span_id_of, trace_hex
from exporter.sinks.metrics.exposition import render_bytes
from exporter.timestamps import parse_rfc3339_ns
from exporter.wiring.events import Pipeline
from tests.components import require
from tests.envelopes import Log

WL = "wl-a"


def applied() -> tuple[Pipeline, Log]:
    log = Log()
    log.add("unit.created", at_ms=0)
    log.add("unit.ready", occurred_at="2026-03-01T12:00:01.250000007Z")
    log.add("unit.allocated", at_ms=2000)
    log.add("unit.allocation_delivered", at_ms=2030)
    log.add("unit.draining", at_ms=3000, data={"reason": "replace"})
    log.add("unit.stopped", at_ms=4500)
    log.add("unit.created", "u2", at_ms=100)
    log.add("unit.ready", "u2", at_ms=200)
    p = Pipeline()
    wl = p.workload(WL)
    for ev in log.events:
        wl.offer(ev)
    return p, log


def exemplars(text: str) -> dict[str, list[tuple[dict, float, dict, float | None]]]:
    """metric family -> [(sample labels, exemplar labels, exemplar value, exemplar ts)]"""
    out: dict[str, list] = {}
    for fam in parse_openmetrics(text):
        for s in fam.samples:
            if s.exemplar is not None:
                ts = s.exemplar.timestamp
                out.setdefault(fam.name, []).append(
                    (s.labels, s.exemplar.labels, s.exemplar.value,
                     None if ts is None else float(ts))
                )
    return out


def test_openmetrics_carries_the_units_trace_id_as_exemplars():
    p, log = applied()
    text = render_bytes(p.registry, openmetrics=True).decode()
    ex = exemplars(text)
    ready = ex["zaroz_unit_ready_seconds"]
    by_trace = {e[1]["trace_id"]: e for e in ready}
    assert set(by_trace) == {trace_hex(WL, "u1"), trace_hex(WL, "u2")}
    u1 = by_trace[trace_hex(WL, "u1")]
    assert u1[0]["le"] == "2" and u1[2] == 1.250000007
    # The timestamp is the occurred_at of the event that ended the interval, exact to the ns.
    assert '1772366401.250000007' in text
    assert abs(u1[3] - parse_rfc3339_ns("2026-03-01T12:00:01.250000007Z") / 1e9) < 1e-6
    (ack,) = ex["zaroz_unit_allocation_ack_seconds"]
    allocated_at = log.events[2]["occurred_at"]
    assert ack[0]["le"] == "0.05" and ack[1] == {
        "trace_id": trace_hex(WL, "u1"),
        "span_id": f"{span_id_of(WL, 'u1', 'allocation', allocated_at):016x}"}
    assert abs(ack[2] - 0.03) < 1e-12
    (drain,) = ex["zaroz_unit_drain_seconds"]
    assert drain[0]["reason"] == "replace" and drain[0]["le"] == "2" and drain[2] == 1.5


def test_the_text_format_has_no_exemplars():
    p, _ = applied()
    text = render_bytes(p.registry).decode()
    assert " # {" not in text and "trace_id" not in text
    list(parse_text(text))  # the 0.0.4 parser accepts it
    promtool = require("promtool")
    r = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True)
    assert b"error" not in r.stderr.lower(), r.stderr


def test_exemplar_renders_follow_new_observations():
    p, log = applied()
    before = render_bytes(p.registry, openmetrics=True)
    assert render_bytes(p.registry, openmetrics=True) == before  # cached
    wl = p.workload(WL)
    for ev in (log.add("unit.created", "u3", at_ms=5000), log.add("unit.ready", "u3", at_ms=5100)):
        wl.offer(ev)
    text = render_bytes(p.registry, openmetrics=True).decode()
    ready = exemplars(text)["zaroz_unit_ready_seconds"]
    assert trace_hex(WL, "u3") in {e[1]["trace_id"] for e in ready}
    # u3 (0.1 s) took u2's bucket (le=0.1): a bucket keeps its latest exemplar.
    assert trace_hex(WL, "u2") not in {e[1]["trace_id"] for e in ready}
    assert " # {" not in render_bytes(p.registry).decode()
