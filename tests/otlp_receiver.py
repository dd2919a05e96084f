"""A real OTLP/HTTP trace receiver for tests and the bench: `POST /v1/traces`, protobuf bodies
(`ExportTraceServiceRequest` from opentelemetry-proto), gzip or deflate aware.

It runs an aiohttp server on 127.0.0.1 in its own thread and event loop, because the SDK's
exporter posts from its batch thread with blocking HTTP: the tests stay plain functions.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
import zlib
from dataclasses import dataclass, field
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


class OtlpReceiver:
    """`with OtlpReceiver() as rx:` ... `rx.endpoint` (base URL) ... `rx.spans`."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep  # False: count spans without keeping them (the bench)
        self.count = 0
        self.spans: list[Span] = []
        self.requests = 0
        self.gzipped = 0
        self.fail_status: int | None = None  # answer every request with this status when set
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
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
        if self.fail_status is not None:
            return web.Response(status=self.fail_status, text="refused by test")
        if request.content_type != PROTOBUF:
            return web.Response(status=415, text="protobuf only")
        try:
            spans = decode(body)
        except Exception as e:  # a malformed body is the client's bug: say so
            return web.Response(status=400, text=f"undecodable: {e}")
        with self._lock:
            self.count += len(spans)
            if self.keep:
                self.spans.extend(spans)
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
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

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

    def by_trace(self) -> dict[str, list[Span]]:
        out: dict[str, list[Span]] = {}
        for s in list(self.spans):
            out.setdefault(s.trace_id, []).append(s)
        return out


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

__all__ = ["OtlpReceiver", "Span", "decode"]
