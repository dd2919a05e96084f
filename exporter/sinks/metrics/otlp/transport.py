"""The SDK's OTLP metric exporters, sending requests we encode ourselves.

Sending stays the SDK's: endpoint (OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT), headers, TLS,
compression, timeout, and its retries of 429, 502, 503 and 504 with backoff, following a
`Retry-After`, within the timeout. Over HTTP the request body goes through the exporter's client
(`_client.export`), whose result keeps the status (413: the caller splits); over gRPC through the
mixin's `_translate_data` seam, as for traces (sinks/traces/transport.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, cast
from urllib.parse import urlsplit

HTTP, GRPC = "http/protobuf", "grpc"


class Sent(NamedTuple):
    ok: bool
    status: int | None  # the HTTP status (None: none was received, or gRPC)
    error: str


class MetricsTransport(Protocol):
    endpoint: str

    def send(self, body: bytes, points: int) -> Sent: ...

    def shutdown(self) -> None: ...


def enabled(flag: str | None, env: Mapping[str, str] | None = None) -> bool:
    """On with --otlp-metrics-endpoint, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, or
    OTEL_EXPORTER_OTLP_ENDPOINT with OTEL_METRICS_EXPORTER=otlp; never with
    OTEL_SDK_DISABLED=true or OTEL_METRICS_EXPORTER=none (the flag still wins)."""
    if flag:
        return True
    e = os.environ if env is None else env
    if e.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = e.get("OTEL_METRICS_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(e.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")) or (
        exporter == "otlp" and bool(e.get("OTEL_EXPORTER_OTLP_ENDPOINT")))


def protocol() -> str:
    p = (os.environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
         or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or HTTP).strip().lower()
    if p not in (HTTP, GRPC):
        raise ValueError(f"unsupported OTLP protocol {p!r}: use {HTTP} or {GRPC}")
    return p


def metrics_url(endpoint: str) -> str:
    """A base URL (as OTEL_EXPORTER_OTLP_ENDPOINT) -> its /v1/metrics URL; a URL with a path
    other than / (VictoriaMetrics' /opentelemetry/v1/metrics) is kept."""
    if urlsplit(endpoint).path.strip("/"):
        return endpoint
    return endpoint.rstrip("/") + "/v1/metrics"


class _Http:
    def __init__(self, endpoint: str | None) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        from exporter.sinks.traces.otlp import _http_session

        self.exporter = OTLPMetricExporter(
            endpoint=metrics_url(endpoint) if endpoint else None, session=_http_session())
        self.client: Any = self.exporter._client
        self.endpoint = str(self.exporter._endpoint)

    def send(self, body: bytes, points: int) -> Sent:
        r = self.client.export(body)
        return Sent(bool(r.success), r.status_code,
                    "" if r.success else str(r.error or r.reason or r.status_code))

    def shutdown(self) -> None:
        self.exporter.shutdown()


class _Grpc:
    def __init__(self, endpoint: str | None) -> None:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )
        from opentelemetry.sdk.metrics.export import MetricExportResult

        class Encoded(NamedTuple):
            body: bytes
            points: int

        class Exporter(GrpcMetricExporter):
            def _translate_data(self, data: Any) -> Any:
                if type(data) is Encoded:
                    return ExportMetricsServiceRequest.FromString(data.body)
                return super()._translate_data(data)

            def _count_data(self, data: Any) -> int:
                if type(data) is Encoded:
                    return data.points
                return int(super()._count_data(data))

        self._encoded = Encoded
        self._success = MetricExportResult.SUCCESS
        self.exporter = Exporter(endpoint=endpoint)
        self.endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or \
            os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "localhost:4317"

    def send(self, body: bytes, points: int) -> Sent:
        # Not MetricsData, which `_export` is typed for: it hands it only to the seams above.
        result = self.exporter._export(cast(Any, self._encoded(body, points)))
        ok = result is self._success
        return Sent(ok, None, "" if ok else "refused or unreachable (gRPC)")

    def shutdown(self) -> None:
        self.exporter.shutdown()


def transport(endpoint: str | None) -> MetricsTransport:
    """The exporter the OTEL_* environment describes; `endpoint` (--otlp-metrics-endpoint)
    overrides its endpoint. gRPC needs the `grpc` extra."""
    if protocol() == GRPC:
        return _Grpc(endpoint)
    return _Http(endpoint)
