"""Exemplars name the span their observation measures: `trace_id` and `span_id` equal the ids of
the span the traces export for it (readiness: `starting`, an acknowledged allocation:
`allocation`, a drain: `draining`), in OpenMetrics and the protobuf exposition, also where
spans of a kind open at one timestamp (the discriminator's counter)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from exporter.model.traceids import span_id_of, trace_hex
from exporter.model.units import Unit
from exporter.sinks.metrics.exposition import render_bytes, render_protobuf
from exporter.sinks.metrics.series import HistogramSeries
from exporter.sinks.traces.otlp import TraceConfig, TraceSink, otlp_exporter
from exporter.wiring.events import Pipeline
from tests import pbdecode
from tests.envelopes import Log
from tests.otlp_receiver import OtlpReceiver, trace_logs
from tests.simlogs import finite_logs

WL = "wl-a"
SPAN_OF = {"zaroz_unit_ready_seconds": "starting",
           "zaroz_unit_allocation_ack_seconds": "allocation",
           "zaroz_unit_drain_seconds": "draining"}
EXEMPLAR = re.compile(r'^(\w+)_bucket\{[^}]*\} \S+ # \{trace_id="([0-9a-f]{32})",'
                      r'span_id="([0-9a-f]{16})"\} ')


def same_instant() -> Log:
    """Spans of one kind opened at the same occurred_at: allocations ended and superseded at
    the instant they began, a drain ended and begun again at one instant."""
    log = Log()
    log.add("unit.created", at_ms=0)
    log.add("unit.ready", at_ms=1000)
    log.add("unit.allocated", at_ms=2000)
    log.add("unit.allocation_delivered", at_ms=2000)
    log.add("unit.allocated", at_ms=2000)  # the second allocation opened at 2000: #1
    log.add("unit.allocation_delivered", at_ms=2500)
    log.add("unit.allocated", at_ms=3000)
    log.add("unit.allocated", at_ms=3000)  # supersedes the one just opened
    log.add("unit.allocation_delivered", at_ms=3100)
    log.add("unit.draining", at_ms=4000, data={"reason": "scale_down"})
    log.add("unit.stopped", at_ms=4000)
    log.add("unit.draining", at_ms=4000, data={"reason": "scale_down"})
    log.add("unit.stopped", at_ms=4500)
    log.add("unit.destroyed", at_ms=5000, data={"reason": "scaled down"})
    return log


@pytest.fixture
def rx():
    with OtlpReceiver() as r:
        yield r


@pytest.fixture
def observed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str, str, str | None]]:
    """Every exemplar observation: (family, workload, unit id, span kind, discriminator)."""
    seen: list[tuple[str, str, str, str, str | None]] = []
    original = HistogramSeries.observe_exemplar

    def spy(self: HistogramSeries, ns: int, workload: str, unit_id: str, at: str,
            kind: str = "", span: str | None = None) -> None:
        seen.append((self.family.metric.name, workload, unit_id, kind, span))
        original(self, ns, workload, unit_id, at, kind, span)

    monkeypatch.setattr(HistogramSeries, "observe_exemplar", spy)
    return seen


def spans_by_id(rx: OtlpReceiver) -> dict[tuple[str, str], str]:
    return {(s.trace_id, s.span_id): s.name for s in rx.spans}


def test_every_observation_names_its_exported_span(rx, observed):
    logs, _ = finite_logs(seed=5, workloads=2, seconds=300, rate=0.8)
    logs[WL] = same_instant().events
    sink = trace_logs(TraceSink(otlp_exporter(rx.endpoint), TraceConfig(backpressure=True)),
                      logs)
    assert sink.stats.dropped == 0
    spans = spans_by_id(rx)
    assert len(observed) > 50
    for family, w, uid, kind, disc in observed:
        assert disc is not None, (family, w, uid)
        ids = (trace_hex(w, uid), f"{span_id_of(w, uid, kind, disc):016x}")
        assert spans.get(ids) == SPAN_OF[family], (family, w, uid, disc)
    mine = [(f, d) for f, w, _, _, d in observed if w == WL]
    assert mine == [
        ("zaroz_unit_ready_seconds", "2026-03-01T12:00:00Z"),
        ("zaroz_unit_allocation_ack_seconds", "2026-03-01T12:00:02Z"),
        ("zaroz_unit_allocation_ack_seconds", "2026-03-01T12:00:02Z#1"),
        ("zaroz_unit_allocation_ack_seconds", "2026-03-01T12:00:03Z#1"),
        ("zaroz_unit_drain_seconds", "2026-03-01T12:00:04Z"),
        ("zaroz_unit_drain_seconds", "2026-03-01T12:00:04Z#1"),
    ]


def test_openmetrics_and_protobuf_exemplars_carry_the_span_id(rx):
    p = Pipeline(traces=TraceSink(otlp_exporter(rx.endpoint), TraceConfig(backpressure=True)))
    trace_logs(p.traces, {WL: same_instant().events}, p)
    spans = spans_by_id(rx)
    text = render_bytes(p.registry, openmetrics=True).decode()
    found = [m.groups() for line in text.splitlines() if (m := EXEMPLAR.match(line))]
    assert {f for f, _, _ in found} == set(SPAN_OF)
    for family, trace, span in found:
        assert spans[(trace, span)] == SPAN_OF[family]
        label_set = f'trace_id="{trace}",span_id="{span}"'
        assert len(label_set) - 6 <= 128  # OpenMetrics counts names and values
    got = set()
    for mf in pbdecode.families(b"".join(render_protobuf(p.registry))):
        for m in mf.metric:
            for b in m.histogram.bucket:
                if b.HasField("exemplar"):
                    labels = {lp.name: lp.value for lp in b.exemplar.label}
                    assert set(labels) == {"trace_id", "span_id"}
                    got.add((mf.name, labels["trace_id"], labels["span_id"]))
    assert got == set(found)


def test_a_start_from_an_older_checkpoint_has_no_span_id():
    u = Unit.restore([1_772_366_400_000_000_000, False, False, None, None, "unknown",
                      "2026-03-01T12:00:00Z"])
    assert u.span_of("starting") is None
    p = Pipeline()
    log = p.workload(WL)
    log.units["u1"] = u
    ev: dict[str, Any] = Log().add("unit.ready", at_ms=1000)
    log.offer(ev)
    text = render_bytes(p.registry, openmetrics=True).decode()
    assert 'zaroz_unit_ready_seconds_count{workload="wl-a"} 1' in text
    assert re.search(r'# \{trace_id="[0-9a-f]{32}"\} 1(\.0)? ', text), text
