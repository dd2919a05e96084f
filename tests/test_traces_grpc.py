"""OTLP over gRPC to a real gRPC receiver, and TLS and headers from the OTEL_EXPORTER_OTLP_*
environment over both protocols: what an operator's collector would see."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.sinks.traces.otlp import TraceConfig, TraceSink, otlp_exporter
from tests.certs import CA
from tests.otlp_receiver import GrpcOtlpReceiver, OtlpReceiver, Span, trace_logs
from tests.simlogs import finite_logs
from tests.test_traces import lifecycle

LOGS, _ = finite_logs(seed=5, workloads=2, seconds=120, rate=0.5)
HEADERS = {"authorization": "Bearer t0ken", "x-tenant": "zaroz"}
ENV_HEADERS = "authorization=Bearer%20t0ken,x-tenant=zaroz"  # W3C baggage-style, as the spec says


def span_set(spans: list[Span]) -> list[tuple[Any, ...]]:
    """Everything a span carries except the per-process resource (service.instance.id)."""
    return sorted(
        (s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns,
         sorted(s.attributes.items()), [(n, t, sorted(a.items())) for n, t, a in s.events],
         s.status_code, s.status_message, s.scope)
        for s in spans
    )


def test_grpc_and_http_receivers_get_identical_span_sets():
    logs = {**LOGS, "wl-a": lifecycle().events}
    with OtlpReceiver() as http_rx, GrpcOtlpReceiver() as grpc_rx:
        via_http = trace_logs(TraceSink(otlp_exporter(http_rx.endpoint, "http/protobuf"),
                                  TraceConfig(backpressure=True)), logs)
        via_grpc = trace_logs(TraceSink(otlp_exporter(grpc_rx.endpoint, "grpc"),
                                  TraceConfig(backpressure=True)), logs)
    assert via_grpc.stats.dropped == 0 and via_grpc.stats.export_failures == 0
    assert via_grpc.stats.exported == via_http.stats.exported == len(grpc_rx.spans) > 100
    assert grpc_rx.requests >= 1 and http_rx.requests >= 1
    assert span_set(grpc_rx.spans) == span_set(http_rx.spans)
    assert {s.resource["service.name"] for s in grpc_rx.spans} == {"zaroz-exporter"}


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """The receiver's certificate and key, and the CA file a client trusts it by."""
    d = tmp_path_factory.mktemp("tls")
    ca = CA.make("otlp-test-ca")
    ca.issue("localhost", d / "server.crt", d / "server.key")
    return str(d / "server.crt"), str(d / "server.key"), str(ca.write(d / "ca.crt"))


RECEIVERS = {"http/protobuf": OtlpReceiver, "grpc": GrpcOtlpReceiver}


@pytest.mark.parametrize("protocol", list(RECEIVERS))
def test_tls_and_headers_come_from_the_otel_environment(protocol, cert, monkeypatch):
    with RECEIVERS[protocol](require_headers=HEADERS, tls=cert[:2]) as rx:
        assert rx.endpoint.startswith("https://")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", cert[2])
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", ENV_HEADERS)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
        sink = trace_logs(TraceSink.from_env(config=TraceConfig(backpressure=True)),
                          {"wl-a": lifecycle().events})
    assert sink.stats.export_failures == 0 and rx.unauthorized == 0
    assert len(rx.spans) == sink.stats.exported == 11


@pytest.mark.parametrize("protocol", list(RECEIVERS))
def test_a_missing_header_or_untrusted_certificate_fails_the_export(protocol, cert,
                                                                    monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    with RECEIVERS[protocol](require_headers=HEADERS, tls=cert[:2]) as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", cert[2])
        no_header = trace_logs(TraceSink.from_env(), {"wl-a": lifecycle().events})
        assert no_header.stats.export_failures >= 1 and rx.unauthorized >= 1
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", ENV_HEADERS)
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_CERTIFICATE")
        untrusted = trace_logs(TraceSink.from_env(), {"wl-a": lifecycle().events})
        assert untrusted.stats.export_failures >= 1
    assert rx.spans == []
