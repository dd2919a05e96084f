"""A real OTLP/HTTP metrics receiver for tests and the bench, from opentelemetry-proto's
messages: `POST /v1/metrics`, protobuf, gzip aware; an aiohttp server in its own thread.

It keeps every point it accepted, decoded into plain values, so a test can follow each series
over time (start times, resets). Faults on demand: `fail_status` (with `retry_after`), a
`max_body` beyond which a request gets 413, `stop()` and `start()` again on the same port.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from tests.otlp_receiver import _attrs

PROTOBUF = "application/x-protobuf"
SeriesKey = tuple[str, str, frozenset[tuple[str, Any]]]  # kind, name, attributes


@dataclass
class Point:
    kind: str  # sum, gauge, histogram, exponential_histogram
    name: str
    unit: str
    attributes: dict[str, Any]
    start_ns: int
    time_ns: int
    value: float  # a sum's or gauge's value, a histogram's count
    detail: dict[str, Any]  # histograms: sum, bounds, counts; exponential: scale, zero, buckets
    resource: dict[str, Any]


def decode(body: bytes) -> list[Point]:
    req = ExportMetricsServiceRequest.FromString(body)
    out = []
    for rm in req.resource_metrics:
        res = _attrs(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                for p in getattr(m, kind).data_points:
                    detail: dict[str, Any] = {}
                    if kind in ("sum", "gauge"):
                        v = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                    else:
                        v = p.count
                        detail["sum"] = p.sum
                    if kind == "histogram":
                        detail["bounds"] = list(p.explicit_bounds)
                        detail["counts"] = list(p.bucket_counts)
                        detail["exemplars"] = [(e.trace_id.hex(), e.span_id.hex(), e.as_double)
                                               for e in p.exemplars]
                    if kind == "exponential_histogram":
                        detail.update(scale=p.scale, zero_count=p.zero_count,
                                      offset=p.positive.offset,
                                      buckets=list(p.positive.bucket_counts))
                    out.append(Point(kind, m.name, m.unit, _attrs(p.attributes),
                                     p.start_time_unix_nano, p.time_unix_nano, v, detail, res))
    return out


class MetricsReceiver:
    """`with MetricsReceiver() as rx:` ... `rx.endpoint` (the /v1/metrics URL) ... `rx.latest`."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.points: list[Point] = []
        self.requests = 0
        self.refused = 0
        self.too_large = 0
        self.fail_status: int | None = None
        self.retry_after: str | None = None
        self.max_body: int | None = None  # larger bodies: 413
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/metrics"

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        with self._lock:
            self.requests += 1
        if self.fail_status is not None:
            self.refused += 1
            headers = {"Retry-After": self.retry_after} if self.retry_after else {}
            return web.Response(status=self.fail_status, text="refused by test", headers=headers)
        if self.max_body is not None and len(body) > self.max_body:
            self.too_large += 1
            return web.Response(status=413, text="too large")
        points = decode(body)
        with self._lock:
            self.points.extend(points)
        return web.Response(body=ExportMetricsServiceResponse().SerializeToString(),
                            content_type=PROTOBUF)

    async def _start(self) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/metrics", self._handle)
        self._runner = web.AppRunner(app, access_log=None, auto_decompress=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self.port = self._runner.addresses[0][1]

    def start(self) -> MetricsReceiver:
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        """Down (connections refused) until `start()` again, on the same port."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._runner = None

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> MetricsReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def series(self) -> dict[SeriesKey, list[Point]]:
        """Every point accepted, by series, in arrival order."""
        out: dict[SeriesKey, list[Point]] = {}
        with self._lock:
            pts = list(self.points)
        for p in pts:
            out.setdefault((p.kind, p.name, frozenset(p.attributes.items())), []).append(p)
        return out

    def latest(self) -> dict[SeriesKey, Point]:
        return {k: v[-1] for k, v in self.series().items()}
