"""Unit lifecycles as OTLP traces, received by a real OTLP/HTTP receiver (otlp_receiver.py)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from exporter.commands.replay import run as replay_run
from exporter.model.traceids import span_id_of, trace_hex, trace_id_of
from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.otelenv import traces_enabled
from exporter.sinks.traces.builder import SpanRecord, TraceBuilder
from exporter.sinks.traces.otlp import (
    TraceConfig,
    TraceSink,
    otlp_exporter,
    traces_url,
)
from exporter.timestamps import parse_rfc3339_ns
from exporter.wiring.events import Pipeline
from tests.envelopes import Log
from tests.otlp_receiver import OtlpReceiver, Span, trace_logs
from tests.simlogs import finite_logs, parse, value

ROOT = Path(__file__).resolve().parent.parent
WL = "wl-a"
ERROR = 2
SECRET = "s3cr3t-user-data"


def lifecycle() -> Log:
    """One unit through every span kind: start, allocations of each outcome, busy, a restart,
    a drain; a second unit that fails during startup."""
    log = Log()
    log.add("unit.created", at_ms=0, data={"userData": {"token": SECRET}})
    log.add("unit.starting", at_ms=5)
    log.add("unit.ready", data={"private_name": SECRET},
            occurred_at="2026-03-01T12:00:01.500000123Z")  # exact ns survive end to end
    log.add("unit.accepting", at_ms=1600)
    log.add("unit.allocated", at_ms=2000, data={"private_name": "k", "allocation_id": "alloc_1",
                                                  "userData": SECRET})
    log.add("unit.allocation_delivered", at_ms=2050)
    log.add("unit.busy", at_ms=2100)
    log.add("unit.idle", at_ms=3000)
    log.add("unit.allocated", at_ms=4000)
    log.add("unit.allocation_undelivered", at_ms=4100)
    log.add("unit.allocated", at_ms=5000)
    log.add("unit.allocated", at_ms=5200)  # supersedes the one at 5000
    log.add("unit.exited", at_ms=6000, data={"code": 137, "restarted": True})  # abandons 5200
    log.add("unit.ready", at_ms=7000)
    log.add("unit.not_accepting", at_ms=7500)
    log.add("unit.draining", at_ms=8000, data={"reason": "scale_down"})
    log.add("unit.stopped", at_ms=9000)
    log.add("unit.destroyed", at_ms=9100, data={"reason": "scaled down"})
    log.add("unit.created", "u2", at_ms=100)
    log.add("unit.failed", "u2", at_ms=400, data={"reason": "image pull"})
    log.add("unit.destroyed", "u2", at_ms=500)
    return log


def ns(log: Log, seq: int) -> int:
    return parse_rfc3339_ns(log.events[seq - 1]["occurred_at"])


def export(events: list[dict[str, Any]], rx: OtlpReceiver, after: int = 0,
           config: TraceConfig | None = None) -> TraceSink:
    sink = TraceSink(otlp_exporter(rx.endpoint), config)
    p = Pipeline(traces=sink)
    log = p.workload(WL, after=after)
    for ev in events:
        log.offer(ev)
    sink.shutdown()
    return sink


@pytest.fixture
def rx():
    with OtlpReceiver() as r:
        yield r


def by_name(spans: list[Span]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = {}
    for s in sorted(spans, key=lambda s: s.start_ns):
        out.setdefault(s.name, []).append(s)
    return out


def test_a_unit_lifecycle_becomes_one_trace_with_the_expected_tree(rx):
    log = lifecycle()
    sink = export(log.events, rx)
    assert sink.stats.dropped == 0 and sink.stats.export_failures == 0
    traces = rx.by_trace()
    assert set(traces) == {trace_hex(WL, "u1"), trace_hex(WL, "u2")}
    spans = by_name(traces[trace_hex(WL, "u1")])
    (root,) = spans.pop("unit")
    assert root.parent_span_id == ""
    assert root.span_id == f"{span_id_of(WL, 'u1', 'unit'):016x}"
    assert (root.start_ns, root.end_ns) == (ns(log, 1), ns(log, 18))
    assert root.attributes == {
        "zaroz.workload": WL, "zaroz.unit.id": "u1", "zaroz.unit.key": "u1",
        "zaroz.destroy.reason": "scaled down",
    }
    assert root.status_code == 0
    assert [(e[0], e[1], e[2]) for e in root.events] == [
        ("accepting", ns(log, 4), {}),
        ("exited", ns(log, 13), {"zaroz.exit.code": 137, "zaroz.exit.restarted": True}),
        ("not_accepting", ns(log, 15), {}),
    ]
    for kids in spans.values():
        for s in kids:
            assert s.parent_span_id == root.span_id and s.trace_id == root.trace_id
            assert s.attributes["zaroz.unit.id"] == "u1"
    assert sorted(spans) == ["allocation", "busy", "draining", "incarnation", "starting"]
    (starting,) = spans["starting"]
    assert (starting.start_ns, starting.end_ns) == (ns(log, 1), 1772366401500000123)
    assert starting.status_code == 0
    allocs = [(s.start_ns, s.end_ns, s.status_code, s.attributes["zaroz.allocation.outcome"])
              for s in spans["allocation"]]
    assert allocs == [
        (ns(log, 5), ns(log, 6), 0, "delivered"),
        (ns(log, 9), ns(log, 10), ERROR, "undelivered"),
        (ns(log, 11), ns(log, 12), ERROR, "superseded"),
        (ns(log, 12), ns(log, 13), ERROR, "abandoned"),
    ]
    assert spans["allocation"][0].attributes["zaroz.allocation.id"] == "alloc_1"
    assert spans["allocation"][1].status_message == "undelivered"
    ((busy,), (inc,), (drain,)) = spans["busy"], spans["incarnation"], spans["draining"]
    assert (busy.start_ns, busy.end_ns) == (ns(log, 7), ns(log, 8))
    assert (inc.start_ns, inc.end_ns, inc.status_code) == (ns(log, 13), ns(log, 14), 0)
    assert (drain.start_ns, drain.end_ns) == (ns(log, 16), ns(log, 17))
    assert drain.attributes["zaroz.drain.reason"] == "scale_down"
    # Resource: OpenTelemetry semantic conventions.
    assert root.resource["service.name"] == "zaroz-exporter"
    assert root.resource["service.instance.id"]


def test_a_failed_startup_is_an_error(rx):
    log = lifecycle()
    export(log.events, rx)
    spans = by_name(rx.by_trace()[trace_hex(WL, "u2")])
    (root,), (starting,) = spans["unit"], spans["starting"]
    assert root.status_code == ERROR and root.status_message == "failed: image pull"
    assert root.events == [("failed", ns(log, 20), {"zaroz.failure.reason": "image pull"})]
    assert starting.status_code == ERROR and starting.end_ns == ns(log, 20)


def test_no_user_data_or_event_data_in_any_span(rx):
    export(lifecycle().events, rx)
    assert rx.spans
    for s in rx.spans:
        blob = repr((s.attributes, s.events, s.status_message, s.resource))
        assert SECRET not in blob and "userData" not in blob and "private_name" not in blob
        keys = set(s.attributes) | {k for e in s.events for k in e[2]}
        assert all(k.startswith("zaroz.") for k in keys), keys


def test_ids_are_stable_across_runs(rx):
    log = lifecycle()
    export(log.events, rx)
    first = sorted((s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns)
                   for s in rx.spans)
    rx.spans.clear()
    export(log.events, rx)
    again = sorted((s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns)
                   for s in rx.spans)
    assert first == again
    assert len({s[1] for s in first}) == len(first)  # span ids are unique
    assert trace_id_of(WL, "u1") != trace_id_of("other", "u1")


def test_a_restarted_exporter_continues_the_same_trace(rx):
    log = lifecycle()
    export(log.events, rx)
    whole = {(s.span_id, s.parent_span_id, s.start_ns, s.end_ns) for s in rx.spans}
    rx.spans.clear()
    # First exporter stops after seq 12 (unit u1 still alive): its open spans and root stay out.
    cut = 12
    first = export(log.events[:cut], rx)
    first_ids = {s.span_id for s in rx.spans}
    assert all(s.name != "unit" for s in rx.spans)
    assert first.stats.spans == len(rx.spans)
    # Its successor resumes from the cursor: same trace, root exported at unit.destroyed.
    export(log.events[cut:], rx, after=cut)
    u1 = by_name(rx.by_trace()[trace_hex(WL, "u1")])
    (root,) = u1["unit"]
    assert root.attributes["zaroz.unit.created_seen"] is False
    assert root.start_ns == ns(log, cut + 1) and root.end_ns == ns(log, 18)
    assert {s.parent_span_id for n, ss in u1.items() if n != "unit" for s in ss} == {root.span_id}
    # Spans wholly on either side of the restart keep the ids of an uninterrupted run.
    later = {(s.span_id, s.parent_span_id, s.start_ns, s.end_ns) for s in rx.spans
             if s.name in ("incarnation", "draining") and s.trace_id == trace_hex(WL, "u1")}
    assert later and later <= whole
    assert first_ids <= {s[0] for s in whole}


class BlockingExporter(SpanExporter):
    """Holds the first export until released, so the processor's queue fills deterministically."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.got = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(10)
        self.got += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


class RaisingExporter(SpanExporter):
    """An exporter bug: every export raises (with `export_encoded`, the encoded path too)."""

    def __init__(self, encoded: bool) -> None:
        if encoded:
            self.export_encoded = self._raise

    def _raise(self, *args: Any) -> Any:
        raise RuntimeError("exporter bug")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._raise(spans)


@pytest.mark.parametrize("encoded", [True, False], ids=["encoded", "sdk"])
def test_an_exporter_that_raises_is_a_counted_failure(encoded, caplog):
    sink = TraceSink(RaisingExporter(encoded), TraceConfig(max_export_batch_size=4,
                                                           backpressure=True))
    assert sink.encoded is encoded
    for r in records(10):
        sink.emit(r)
    sink.shutdown()
    st = sink.stats
    assert (st.handed, st.exported, st.failed_spans, st.dropped) == (10, 0, 10, 0)
    assert st.export_failures == 3  # batches of 4, 4, 2
    assert "OTLP span export raised" in caplog.text


def records(n: int) -> list[SpanRecord]:
    return [SpanRecord("busy", 7, i + 1, 99, 10**18, 10**18 + i, {}) for i in range(n)]


def overflow(sink: TraceSink) -> None:
    """50 spans into a sink whose exporter blocks: the first is handed to the exporter (waited
    for), the other 49 meet a full queue."""
    sink.emit(records(1)[0])
    pause = threading.Event()
    for _ in range(1000):  # until the worker took the first span and blocks in export
        if sink.stats.handed:
            break
        pause.wait(0.01)
    assert sink.stats.handed == 1
    for r in records(50)[1:]:
        sink.emit(r)


def test_dropped_spans_are_counted_when_the_queue_is_tiny():
    exp = BlockingExporter()
    sink = TraceSink(exp, TraceConfig(max_queue_size=4, max_export_batch_size=2,
                                      schedule_delay_millis=10))
    p = Pipeline(traces=sink)
    overflow(sink)
    assert sink.stats.dropped > 0
    exp.release.set()
    sink.shutdown()
    st = sink.stats
    assert st.spans == 50 and exp.got == st.exported
    assert st.exported + st.dropped == 50
    text = parse(render_bytes(p.registry).decode())
    assert value(text, "zaroz_traces_spans_dropped_total") == st.dropped
    assert value(text, "zaroz_traces_spans_total") == 50
    assert value(text, "zaroz_traces_spans_exported_total") == st.exported


def test_backpressure_drops_nothing_with_a_tiny_queue(rx):
    sink = TraceSink(otlp_exporter(rx.endpoint),
                     TraceConfig(max_queue_size=8, max_export_batch_size=4, backpressure=True))
    for r in records(500):
        sink.emit(r)
    sink.shutdown()
    assert sink.stats.dropped == 0 and len(rx.spans) == 500 == sink.stats.exported


@pytest.mark.parametrize("sdk", [False, True], ids=["encoded", "sdk"])
def test_export_failures_are_counted(rx, sdk):
    """Both paths (spans encoded by wire.py, SDK spans through CountingExporter) count alike."""
    rx.fail_status = 400  # not retryable: the exporter gives the batch up at once
    sink = TraceSink(otlp_exporter(rx.endpoint, timeout=2), TraceConfig(), sdk=sdk)
    assert sink.encoded is not sdk
    p = Pipeline(traces=sink)
    for r in records(10):
        sink.emit(r)
    sink.shutdown()
    assert sink.stats.export_failures >= 1 and sink.stats.failed_spans == 10
    assert sink.stats.handed == 10 and sink.stats.exported == 0
    text = parse(render_bytes(p.registry).decode())
    assert value(text, "zaroz_traces_export_failures_total") == sink.stats.export_failures


def test_simulated_logs_trace_every_unit_consistently_with_the_metrics(rx, tmp_path):
    logs, _ = finite_logs(seed=3, workloads=2, seconds=300, rate=0.5)
    sink = TraceSink(otlp_exporter(rx.endpoint), TraceConfig(backpressure=True))
    p = Pipeline(traces=sink)
    trace_logs(sink, logs, p)
    assert sink.stats.dropped == 0 and len(rx.spans) == sink.stats.spans > 0
    roots = [s for s in rx.spans if s.parent_span_id == ""]
    assert len({s.trace_id for s in roots}) == len(roots)  # one root per trace
    root_of = {s.trace_id: s.span_id for s in roots}
    for s in rx.spans:
        if s.parent_span_id:
            assert s.parent_span_id == root_of[s.trace_id]
        assert s.end_ns >= s.start_ns
    # Allocation spans agree with the model's allocation outcomes.
    m = parse(render_bytes(p.registry).decode())
    outcomes = Counter(s.attributes.get("zaroz.allocation.outcome") for s in rx.spans
                       if s.name == "allocation")
    for o in ("delivered", "undelivered", "superseded", "abandoned"):
        total = sum(value(m, "zaroz_unit_allocations_total", workload=wl, outcome=o)
                    for wl in logs)
        assert outcomes[o] == total, o
    errors = {s.status_code for s in rx.spans if s.name == "allocation"
              and s.attributes.get("zaroz.allocation.outcome") != "delivered"
              and "zaroz.allocation.outcome" in s.attributes}
    assert errors <= {ERROR}
    # Every root the metrics saw destroyed ends at its unit.destroyed.
    destroyed = sum(1 for evs in logs.values() for e in evs if e["type"] == "unit.destroyed")
    assert sum(1 for s in roots if "zaroz.destroy.reason" in s.attributes
               or not s.attributes.get("zaroz.span.incomplete")) >= destroyed


def test_replay_with_an_otlp_endpoint_sends_the_traces(rx, tmp_path: Path, capsysbinary):
    log = lifecycle()
    path = tmp_path / f"{WL}.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in log.events) + b"\n")
    assert replay_run([str(path)], None, False, False, otlp_endpoint=rx.endpoint) == 0
    out = capsysbinary.readouterr()
    assert b"zaroz_unit_ready_seconds_bucket" in out.out
    assert b"traces: 11 spans, 11 exported, 0 dropped" in out.err
    assert {s.trace_id for s in rx.spans} == {trace_hex(WL, "u1"), trace_hex(WL, "u2")}
    assert len(rx.spans) == 11


def test_replay_ends_spans_still_open_at_the_end_of_the_log(rx, tmp_path: Path, capsysbinary):
    log = Log()
    log.add("unit.created", at_ms=0)
    log.add("unit.ready", at_ms=1000)
    log.add("unit.busy", at_ms=2000)
    log.add("units.scaled", None, at_ms=3000)
    path = tmp_path / f"{WL}.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in log.events) + b"\n")
    assert replay_run([str(path)], None, True, False, otlp_endpoint=rx.endpoint) == 0
    spans = by_name(rx.spans)
    (root,), (busy,) = spans["unit"], spans["busy"]
    assert root.end_ns == busy.end_ns == ns(log, 4)  # the log's last event
    assert root.attributes["zaroz.span.incomplete"] is True


def test_idle_expiry_ends_the_root_at_the_last_event():
    out: list[SpanRecord] = []
    b = TraceBuilder(WL, out.append, idle_ns=60 * 10**9)
    log = Log()
    for ev in (log.add("unit.created", at_ms=0), log.add("unit.busy", at_ms=500)):
        b(ev["unit"]["id"], ev["type"], ev["occurred_at"], ev["data"], "key-1")
    b.expire(ns(log, 2) + 30 * 10**9)
    assert out == [] and len(b.units) == 1
    b.expire(ns(log, 2) + 61 * 10**9)
    assert [r.name for r in out] == ["starting", "busy", "unit"] and not b.units
    assert all(r.end_ns == ns(log, 2) for r in out)
    assert out[-1].attributes["zaroz.unit.expired"] is True
    assert out[-1].attributes["zaroz.unit.key"] == "key-1"


def test_clock_skew_keeps_the_span_and_flags_it():
    out: list[SpanRecord] = []
    b = TraceBuilder(WL, out.append)
    b("u1", "unit.busy", "2026-03-01T12:00:05Z", {})
    b("u1", "unit.idle", "2026-03-01T12:00:04Z", {})
    (r,) = out
    assert r.end_ns == r.start_ns and r.attributes["zaroz.clock_skew"] is True


def test_traces_are_off_without_the_environment():
    assert not traces_enabled({})
    assert traces_enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert traces_enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not traces_enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED":
                               "true"})
    assert not traces_enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c",
                               "OTEL_TRACES_EXPORTER": "none"})
    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/v1/traces") == "http://c:4318/v1/traces"


def test_without_traces_the_tap_stays_none():
    p = Pipeline()
    assert p.workload(WL).tap is None


def test_environment_configures_the_exporter(rx, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "zaroz-test")
    sink = TraceSink.from_env()
    sink.emit(records(1)[0])
    sink.shutdown()
    assert len(rx.spans) == 1 and rx.gzipped >= 1
    assert rx.spans[0].resource["service.name"] == "zaroz-test"


def test_grpc_protocol_is_selected_by_the_environment(monkeypatch):
    # The test extra installs the gRPC exporter, so its absence is a failure, not a skip.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

    exp = otlp_exporter("http://127.0.0.1:4317")
    assert isinstance(exp, Grpc) and hasattr(exp, "export_encoded")
    exp.shutdown()
    with pytest.raises(ValueError):
        otlp_exporter(protocol="thrift")


def test_builder_state_through_json_continues_exactly_at_every_cut():
    """A builder restored from `state()` (through JSON, as the checkpoint stores it) and fed the
    rest of the log emits exactly what an uninterrupted one emits after the cut, at any cut."""
    events = lifecycle().events

    def feed(b: TraceBuilder, evs: list[dict[str, Any]]) -> None:
        for ev in evs:
            b(ev["unit"]["id"], ev["type"], ev["occurred_at"], ev["data"], ev["unit"]["id"])

    whole: list[SpanRecord] = []
    feed(TraceBuilder(WL, whole.append), events)
    for cut in range(len(events) + 1):
        first: list[SpanRecord] = []
        b = TraceBuilder(WL, first.append)
        feed(b, events[:cut])
        again: list[SpanRecord] = []
        b2 = TraceBuilder(WL, again.append)
        b2.restore(orjson.loads(orjson.dumps(b.state())))
        feed(b2, events[cut:])
        assert first + again == whole, cut
    with pytest.raises(ValueError):
        TraceBuilder(WL, whole.append).restore({"v": 99, "units": {}, "expired": 0})


_STARTUP_IMPORTS = """
import sys
from exporter.cli import build_parser
from exporter.commands import serve
from exporter.commands.config import ServeConfig
config = ServeConfig.from_args(build_parser().parse_args(
    ["serve", "--events-url", "http://127.0.0.1:9/", "--kube", "off"]))
serve._trace_sink(config)
print(sorted({m.split(".")[0] for m in sys.modules if m.startswith("opentelemetry")}
             | {m for m in sys.modules if m.startswith("exporter.sinks.traces.otlp")
                or m == "exporter.commands.otlpmetrics"}))
"""


@pytest.mark.parametrize("env, imported", [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, True),
])
def test_the_otlp_modules_are_imported_only_when_traces_are_on(env: dict[str, str],
                                                                imported: bool):
    """A start with neither traces nor OTLP metrics does not import the OpenTelemetry SDK or
    the OTLP encoders (~80 ms before ready at every restart)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", _STARTUP_IMPORTS], env=base | env, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    got = ast.literal_eval(out.strip())
    if imported:
        assert "opentelemetry" in got and "exporter.sinks.traces.otlp" in got
    else:
        assert got == []
