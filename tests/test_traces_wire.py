"""The encoded pipeline (span records written straight into OTLP requests, own batcher) sends
exactly what the SDK pipeline sends, and counts drops and failures the same way."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from exporter import __version__
from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.traces.builder import SpanRecord
from exporter.sinks.traces.otlp import TraceConfig, TraceSink, default_resource, otlp_exporter
from exporter.sinks.traces.wire import Encoder
from exporter.sinks.varint import varint
from exporter.wiring.events import Pipeline
from tests.otlp_receiver import OtlpReceiver, trace_logs
from tests.simlogs import finite_logs, parse, value
from tests.test_traces import WL, lifecycle, overflow
from tests.test_traces_grpc import span_set

ODD = SpanRecord("odd", 2**127 + 5, 2**63 + 7, 9, 1, 2**63 + 1,
                 {"f": 1.5, "neg": -3, "big": 2**62, "arr": ["a", "b"], "yes": True, "one": 1,
                  "utf": "zaroz \u00e9\u20ac"},
                 [("e", 3, {"no": False, "n": 0})], "bad \u00e9")


class Capture(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def test_the_encoding_is_the_sdks_byte_for_byte():
    cap = Capture()
    sink = TraceSink(cap, TraceConfig(backpressure=True))
    assert not sink.encoded  # a plain SpanExporter: the SDK pipeline
    recs: list[SpanRecord] = []
    sdk_send = sink.send
    sink.send = lambda r: (recs.append(r), sdk_send(r))  # type: ignore[method-assign]
    log = Pipeline(traces=sink).workload(WL)
    for ev in lifecycle().events:
        log.offer(ev)
    sink.send(ODD)
    sink.shutdown()
    assert len(cap.spans) == len(recs) == 12
    enc = Encoder(cap.spans[0].resource.attributes, "zaroz-exporter", __version__)
    body = enc.request(recs)
    assert body == encode_spans(cap.spans).SerializeToString()
    again = enc.request(recs)  # from the key/value cache this time
    assert again == body
    assert ExportTraceServiceRequest.FromString(body) == encode_spans(cap.spans)


def test_varints_as_protobuf_writes_them():
    assert [varint(n) for n in (0, 1, 127, 128, 300)] == [
        b"\x00", b"\x01", b"\x7f", b"\x80\x01", b"\xac\x02"]
    assert varint(-1) == b"\xff" * 9 + b"\x01"


def test_both_pipelines_deliver_the_same_spans():
    logs, _ = finite_logs(seed=8, workloads=2, seconds=200, rate=0.5)
    with OtlpReceiver() as a, OtlpReceiver() as b:
        batching = TraceConfig(backpressure=True)
        encoded = trace_logs(TraceSink(otlp_exporter(a.endpoint), batching), logs)
        via_sdk = trace_logs(TraceSink(otlp_exporter(b.endpoint), batching, sdk=True), logs)
    assert encoded.encoded and not via_sdk.encoded
    assert encoded.stats.exported == via_sdk.stats.exported == len(a.spans) > 200
    assert span_set(a.spans) == span_set(b.spans)
    ra, rb = a.spans[0].resource, b.spans[0].resource
    assert ra.pop("service.instance.id") != rb.pop("service.instance.id")  # one per process
    assert ra == rb and ra["service.name"] == "zaroz-exporter"


class Blocking:
    """An exporter taking encoded requests that holds the first until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.got = 0
        self.bodies = 0

    def export_encoded(self, body: bytes, count: int) -> bool:
        self.release.wait(10)
        ExportTraceServiceRequest.FromString(body)
        self.got += count
        self.bodies += 1
        return True

    def shutdown(self) -> None:
        self.release.set()


def test_encoded_pipeline_counts_drops_when_the_queue_is_full():
    exp = Blocking()
    sink = TraceSink(exp, TraceConfig(max_queue_size=4, max_export_batch_size=2,  # type: ignore[arg-type]
                                      schedule_delay_millis=10), resource=default_resource())
    assert sink.encoded
    p = Pipeline(traces=sink)
    overflow(sink)
    assert sink.stats.dropped == 49 - 4  # the queue holds 4; the rest were refused
    exp.release.set()
    sink.shutdown()
    st = sink.stats
    assert st.spans == 50 and exp.got == st.exported == 5
    assert st.exported + st.dropped == 50
    text = parse(render_bytes(p.registry).decode())
    assert value(text, "zaroz_traces_spans_dropped_total") == st.dropped
    assert value(text, "zaroz_traces_spans_exported_total") == st.exported
