"""The SDK's OTLP exporters, also taking a request already encoded (`wire.Encoder`).

Sending stays the SDK's: endpoint, headers, TLS, compression, timeout, retries with backoff,
all from the OTEL_EXPORTER_OTLP_* variables exactly as before. Only the encoding of SDK span
objects is skipped. The hooks used are the exporters' own seams: over gRPC the mixin's
`_translate_data` / `_count_data` (made to be overridden per signal); over HTTP the client the
exporter posts its serialized body with (`_client.export`). An SDK without them gets the plain
exporter, and the sink then goes through SDK spans as before (`encoded_capable`).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, TypeGuard

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExporter


class Encoded(NamedTuple):
    body: bytes  # a serialized ExportTraceServiceRequest
    spans: int  # spans in it


class HttpExporter(OTLPSpanExporter):
    def export_encoded(self, body: bytes, count: int) -> bool:
        if self._shutdown:
            return False
        return bool(self._client.export(body).success)


def http_exporter(**kwargs: Any) -> OTLPSpanExporter:
    exp: OTLPSpanExporter = HttpExporter(**kwargs)
    client = getattr(exp, "_client", None)
    if callable(getattr(client, "export", None)) and hasattr(exp, "_shutdown"):
        return exp
    exp.shutdown()
    return OTLPSpanExporter(**kwargs)


class EncodedExporter(Protocol):
    def export_encoded(self, body: bytes, count: int) -> bool: ...


def grpc_exporter(**kwargs: Any) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcSpanExporter,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.sdk.trace.export import SpanExportResult

    if not all(hasattr(GrpcSpanExporter, a) for a in ("_translate_data", "_count_data",
                                                      "_export")):
        return GrpcSpanExporter(**kwargs)

    class GrpcExporter(GrpcSpanExporter):
        def _translate_data(self, data: Any) -> Any:
            if type(data) is Encoded:
                return ExportTraceServiceRequest.FromString(data.body)
            return super()._translate_data(data)

        def _count_data(self, data: Any) -> int:
            if type(data) is Encoded:
                return data.spans
            return int(super()._count_data(data))

        def export_encoded(self, body: bytes, count: int) -> bool:
            request = Encoded(body, count)
            # Not spans, which `_export` is typed for: it hands `data` only to the two seams above.
            return self._export(request) is SpanExportResult.SUCCESS  # type: ignore[arg-type]

    return GrpcExporter(**kwargs)


def encoded_capable(exporter: object) -> TypeGuard[EncodedExporter]:
    return callable(getattr(exporter, "export_encoded", None))
