"""The OTLP mapping of the protobuf exposition, in process: every sample of a registry (counters
with start times, gauges, histograms with native buckets, per-object rows) decodes with the
official opentelemetry-proto messages into the scrape's values under the spec's names; requests
keep to their size and split; the OTEL_* switches."""

from __future__ import annotations

import pytest

from exporter.catalog import Kind, Metric
from exporter.commands.otlpmetrics import default_instance, resource
from exporter.model.sharding import Shard
from exporter.sinks.metrics.exposition import Format, render
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.otlp import client_model, encode
from exporter.sinks.metrics.otlp.names import otel_name
from exporter.sinks.metrics.otlp.transport import enabled, metrics_url
from exporter.sinks.otelenv import interval_from_env
from tests.otlp_metrics_receiver import decode

METRICS = (
    Metric("t_events_total", Kind.COUNTER, "Events.", ("workload",)),
    Metric("t_wait_seconds", Kind.HISTOGRAM, "Waits.", ("workload",), (0.5, 1.0, 5.0),
           "seconds"),
    Metric("t_units", Kind.GAUGE, "Units.", ("workload", "state")),
    Metric("t_build_info", Kind.INFO, "Build.", ("version",)),
)


def _registry() -> Registry:
    reg = Registry(METRICS)
    reg.counter("t_events_total").labels("a").inc(3)
    reg.counter("t_events_total").labels('we"ird\n').inc(2.5)
    h = reg.histogram("t_wait_seconds").labels("a")
    for s in (0.0, 0.2, 0.7, 0.7, 3.0, 9.0):
        h.observe(s)
    reg.gauge("t_units").labels("a", "ready").set(7)
    reg.gauge("t_build_info").labels("1.0").set(1)
    return reg


def _points(reg: Registry, start_of: encode.StartOf, max_points: int = 1000) -> list:
    parts = encode.metrics(client_model.raw_families(render(reg, Format.PROTOBUF)),
                           123, start_of)
    res = encode.resource_attributes({"service.name": "zaroz-exporter"})
    out = []
    for req, n in encode.requests(parts, max_points):
        assert n <= max_points
        out += decode(encode.encode_request(req, res))
    return out


def test_every_sample_decodes_with_its_spec_name_value_and_start_time() -> None:
    starts = {("t_events_total", '["a"]'): 111}
    start_of = encode.starts_of(starts, 50, 99, frozenset(), frozenset(m.name for m in METRICS))
    pts = {(p.kind, p.name, tuple(sorted(p.attributes.items()))): p
           for p in _points(_registry(), start_of)}
    ev = pts[("sum", "t_events", (("workload", "a"),))]
    assert (ev.value, ev.start_ns, ev.time_ns) == (3, 111, 123)
    assert pts[("sum", "t_events", (("workload", 'we"ird\n'),))].start_ns == 50  # the epoch
    g = pts[("gauge", "t_units", (("state", "ready"), ("workload", "a")))]
    assert (g.value, g.start_ns) == (7, 0)
    assert pts[("gauge", "t_build_info", (("version", "1.0"),))].value == 1
    h = pts[("histogram", "t_wait", (("workload", "a"),))]
    assert h.unit == "s" and h.value == 6 and h.detail["sum"] == pytest.approx(13.6)
    assert h.detail["bounds"] == [0.5, 1.0, 5.0] and h.detail["counts"] == [2, 2, 1, 1]
    e = pts[("exponential_histogram", "t_wait", (("workload", "a"),))]
    assert e.value == 6 and e.detail["zero_count"] == 1
    assert sum(e.detail["buckets"]) == 5 and e.detail["scale"] == 3
    # 0.7 lies in OTLP bucket k, (base^k, base^(k+1)], at scale 3
    base = 2 ** (2 ** -3)
    k = e.detail["offset"] + next(i for i, c in enumerate(e.detail["buckets"]) if c == 2)
    assert base ** k < 0.7 <= base ** (k + 1)


def test_requests_keep_to_their_points_and_split_in_halves() -> None:
    reg = Registry(METRICS)
    for i in range(25):
        reg.gauge("t_units").labels(f"w{i}", "ready").set(i)
    parts = list(encode.metrics(client_model.raw_families(render(reg, Format.PROTOBUF)), 1,
                                encode.starts_of({}, 0, 0, frozenset(), frozenset())))
    reqs = list(encode.requests(parts, 10))
    assert [n for _, n in reqs] == [10, 10, 5]
    halves = encode.split(reqs[0][0])
    assert [sum(len(p.points) for p in h) for h in halves] == [5, 5]
    req = halves[0]
    while sum(len(p.points) for p in req) > 1:
        req = encode.split(req)[0]
    assert encode.split(req) == [req]  # a single point is not split further


def test_names_follow_the_prometheus_compatibility_spec() -> None:
    assert otel_name("zaroz_events_total", True) == ("zaroz_events", "")
    assert otel_name("zaroz_unit_ready_seconds", False) == ("zaroz_unit_ready", "s")
    assert otel_name("process_cpu_seconds_total", True) == ("process_cpu", "s")
    assert otel_name("zaroz_exporter_last_scrape_bytes", False) == (
        "zaroz_exporter_last_scrape", "By")
    assert otel_name("zaroz_exporter_series", False) == ("zaroz_exporter_series", "")


def test_switches_and_identity() -> None:
    assert not enabled(None, {})
    assert enabled(None, {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"})
    assert not enabled(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})  # traces only
    assert enabled(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                          "OTEL_METRICS_EXPORTER": "otlp"})
    assert not enabled(None, {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c",
                              "OTEL_METRICS_EXPORTER": "none"})
    assert enabled("http://c:4318", {"OTEL_SDK_DISABLED": "true"})
    assert metrics_url("http://c:4318") == "http://c:4318/v1/metrics"
    assert metrics_url("http://vm:8428/opentelemetry/v1/metrics").endswith("/opentelemetry/v1/"
                                                                           "metrics")
    assert interval_from_env({}) == 60 and interval_from_env(
        {"OTEL_METRIC_EXPORT_INTERVAL": "1500"}) == 1.5
    with pytest.raises(ValueError, match="OTEL_METRIC_EXPORT_INTERVAL"):
        interval_from_env({"OTEL_METRIC_EXPORT_INTERVAL": "soon"})
    env = {"POD_NAME": "zaroz-exporter-2", "POD_NAMESPACE": "mon"}
    assert default_instance(Shard(2, 3), env) == "zaroz-exporter-2"
    assert default_instance(Shard(0, 1), {"POD_NAME": "zaroz-exporter-7d9f-x2"}) == "shard-0"
    r = resource("zaroz-exporter-2", Shard(2, 3), env)
    assert r["service.instance.id"] == "zaroz-exporter-2" and r["k8s.namespace.name"] == "mon"
    assert r["zaroz.shard"] == "2" and r["k8s.pod.name"] == "zaroz-exporter-2"


def test_grpc_transport_sends_the_encoded_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=grpc: the request goes through the SDK's gRPC
    exporter (its `_translate_data` seam) to a real MetricsService, as encoded."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as ms
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as svc

    from exporter.sinks.metrics.otlp.transport import transport

    got: list[bytes] = []

    class Service(svc.MetricsServiceServicer):
        def Export(self, request: ms.ExportMetricsServiceRequest, context: object) -> object:
            got.append(request.SerializeToString())
            return ms.ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    svc.add_MetricsServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_INSECURE", "true")
    try:
        t = transport(f"http://127.0.0.1:{port}")
        parts = encode.metrics(client_model.raw_families(render(_registry(), Format.PROTOBUF)),
                               5, encode.starts_of({}, 1, 1, frozenset(), frozenset()))
        (req, n), = encode.requests(parts, 1000)
        body = encode.encode_request(req, encode.resource_attributes({"service.name": "z"}))
        assert t.send(body, n).ok
        t.shutdown()
    finally:
        server.stop(0)
    assert [len(decode(b)) for b in got] == [len(decode(body))]
    assert {p.name for p in decode(got[0])} >= {"t_events", "t_wait", "t_units"}
