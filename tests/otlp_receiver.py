"""Real OTLP trace receivers for tests and the bench, from opentelemetry-proto's messages:

- `OtlpReceiver`: OTLP/HTTP, `POST /v1/traces`, protobuf bodies, gzip or deflate aware; an
  aiohttp server in its own thread and event loop (the SDK's exporter posts from its batch
  thread with blocking HTTP, so the tests stay plain functions);
- `GrpcOtlpReceiver`: OTLP/gRPC, the collector's `TraceService/Export` served by grpcio.

Both can require TLS (a certificate and key) and request headers (`require_headers`: a request
without them is refused, UNAUTHENTICATED / 401), to check what the OTEL_EXPORTER_OTLP_* variables
make the client send; both decode into the same `Span` values, so their span sets compare.
"""

from __future__ import annotations

import asyncio
import gzip
import ssl
import threading
import zlib
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

PROTOBUF = "application/x-protobuf"


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return _attrs(v.kvlist_value.values)
    return getattr(v, kind) if kind else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


@dataclass
class Span:
    """One received span, decoded into plain values (ids as lower-case hex)."""

    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    resource: dict[str, Any] = field(repr=False)
    scope: str = ""


def decode(body: bytes) -> list[Span]:
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    return decode_request(req)


def decode_request(req: ExportTraceServiceRequest) -> list[Span]:
    out = []
    for rs in req.resource_spans:
        res = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    Span(
                        s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name,
                        s.start_time_unix_nano, s.end_time_unix_nano, _attrs(s.attributes),
                        [(e.name, e.time_unix_nano, _attrs(e.attributes)) for e in s.events],
                        s.status.code, s.status.message, res, ss.scope.name,
                    )
                )
    return out


class _Kept:
    """What both receivers keep: the spans (or only their count) and the requests refused."""

    def __init__(self, keep: bool, require_headers: dict[str, str] | None,
                 tls: tuple[str, str] | None) -> None:
        self.keep = keep  # False: count spans without keeping them (the bench)
        self.require_headers = {k.lower(): v for k, v in (require_headers or {}).items()}
        self.tls = tls  # (certificate file, key file), PEM
        self.count = 0
        self.spans: list[Span] = []
        self.requests = 0
        self.unauthorized = 0  # requests refused for a missing or wrong required header
        self._lock = threading.Lock()

    def _authorized(self, headers: dict[str, str]) -> bool:
        ok = all(headers.get(k) == v for k, v in self.require_headers.items())
        if not ok:
            with self._lock:
                self.unauthorized += 1
        return ok

    def _keep(self, spans: list[Span]) -> None:
        with self._lock:
            self.count += len(spans)
            if self.keep:
                self.spans.extend(spans)

    def by_trace(self) -> dict[str, list[Span]]:
        out: dict[str, list[Span]] = {}
        for s in list(self.spans):
            out.setdefault(s.trace_id, []).append(s)
        return out


class OtlpReceiver(_Kept):
    """`with OtlpReceiver() as rx:` ... `rx.endpoint` (base URL) ... `rx.spans`."""

    def __init__(self, keep: bool = True, *, require_headers: dict[str, str] | None = None,
                 tls: tuple[str, str] | None = None, port: int = 0) -> None:
        super().__init__(keep, require_headers, tls)
        self.gzipped = 0
        self.fail_status: int | None = None  # answer every request with this status when set
        self.delay = 0.0  # seconds each request waits before it is answered (a slow collector)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = port  # 0: any free port

    @property
    def endpoint(self) -> str:
        if self.tls:
            return f"https://localhost:{self.port}"
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        enc = request.headers.get("Content-Encoding", "").lower()
        if enc == "gzip":
            body = gzip.decompress(body)
            self.gzipped += 1
        elif enc == "deflate":
            body = zlib.decompress(body)
        with self._lock:
            self.requests += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if not self._authorized({k.lower(): v for k, v in request.headers.items()}):
            return web.Response(status=401, text="required header missing")
        if self.fail_status is not None:
            return web.Response(status=self.fail_status, text="refused by test")
        if request.content_type != PROTOBUF:
            return web.Response(status=415, text="protobuf only")
        try:
            spans = decode(body)
        except Exception as e:  # a malformed body is the client's bug: say so
            return web.Response(status=400, text=f"undecodable: {e}")
        self._keep(spans)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type=PROTOBUF
        )

    async def _stats(self, request: web.Request) -> web.Response:
        with self._lock:
            return web.json_response({"spans": self.count, "requests": self.requests})

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._handle)
        app.router.add_get("/stats", self._stats)
        # Bodies are decompressed here, not by aiohttp, so the test sees what the client sent.
        self._runner = web.AppRunner(app, access_log=None, auto_decompress=False)
        await self._runner.setup()
        ctx = None
        if self.tls:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(*self.tls)
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=ctx)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def start(self) -> OtlpReceiver:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class GrpcOtlpReceiver(_Kept):
    """`with GrpcOtlpReceiver() as rx:` ... `rx.endpoint` (http:// or, with TLS, https://
    localhost:port, as OTEL_EXPORTER_OTLP_ENDPOINT takes it) ... `rx.spans`."""

    def __init__(self, keep: bool = True, *, require_headers: dict[str, str] | None = None,
                 tls: tuple[str, str] | None = None) -> None:
        super().__init__(keep, require_headers, tls)
        self.port = 0
        self._server: Any = None

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://localhost:{self.port}"

    def start(self) -> GrpcOtlpReceiver:
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as svc

        rx = self

        class Service(svc.TraceServiceServicer):
            def Export(self, request: ExportTraceServiceRequest, context: Any) -> Any:
                md = {k.lower(): v for k, v in context.invocation_metadata()}
                with rx._lock:
                    rx.requests += 1
                if not rx._authorized(md):
                    context.abort(grpc.StatusCode.UNAUTHENTICATED, "required header missing")
                rx._keep(decode_request(request))
                return ExportTraceServiceResponse()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                             options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
        svc.add_TraceServiceServicer_to_server(Service(), server)
        if self.tls:
            cert, key = (Path(p).read_bytes() for p in self.tls)
            creds = grpc.ssl_server_credentials([(key, cert)])
            self.port = server.add_secure_port("127.0.0.1:0", creds)
        else:
            self.port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=2).wait(10)

    def __enter__(self) -> GrpcOtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """`python -m tests.otlp_receiver`: serve in this process (counting only) until stdin
    closes; prints the endpoint first. The bench runs it apart so it does not share the GIL."""
    import sys

    rx = OtlpReceiver(keep=False).start()
    print(rx.endpoint, flush=True)
    sys.stdin.read()
    rx.stop()


if __name__ == "__main__":
    main()

__all__ = ["GrpcOtlpReceiver", "OtlpReceiver", "Span", "decode", "decode_request"]


def trace_logs(sink: Any, logs: dict[str, list[dict[str, Any]]], pipeline: Any = None) -> Any:
    """Apply whole logs through a Pipeline (`pipeline`, else a new one) into `sink` (an
    exporter.sinks.traces.otlp.TraceSink), close what is open at each log's end, and shut the
    sink down (everything exported); returns the sink."""
    from exporter.wiring.events import Pipeline

    p = Pipeline(traces=sink) if pipeline is None else pipeline
    for wl, evs in logs.items():
        lg = p.workload(wl)
        for ev in evs:
            lg.offer(ev)
        lg.flush()
    sink.close_all({wl: lg.last_at for wl, lg in p.logs.items()})
    sink.shutdown()
    return sink
