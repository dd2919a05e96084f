"""The OTLP/HTTP collector the exporters send spans to, on the run's own event loop, refusing
(503), slow, or absent (its port closed) while the schedule says so; it keeps every span id it
accepted, and how many times."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections import Counter

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"


class Collector:
    def __init__(self, port: int) -> None:
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}"
        self.received: Counter[str] = Counter()  # span id (hex) -> times accepted
        self.refusing = 0  # windows open; > 0: answer 503
        self.slow = 0
        self.absent = 0
        self.answers: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        enc = request.headers.get("Content-Encoding", "").lower()
        if enc == "gzip":
            body = gzip.decompress(body)
        elif enc == "deflate":
            body = zlib.decompress(body)
        if self.slow:
            await asyncio.sleep(1.0)
        if self.refusing:
            self.answers["503"] += 1
            return web.Response(status=503, text="refused")
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.received[s.span_id.hex()] += 1
        self.answers["200"] += 1
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type=PROTOBUF)

    async def start(self) -> None:
        if self._runner is not None:
            return
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/traces", self._handle)
        self._runner = web.AppRunner(app, access_log=None, auto_decompress=False,
                                     shutdown_timeout=0.2)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def window(self, mode: str, seconds: float) -> None:
        """Refusing, slow or absent for `seconds`; windows overlap."""
        if mode == "absent":
            self.absent += 1
            await self.stop()
        else:
            setattr(self, mode, getattr(self, mode) + 1)
        try:
            await asyncio.sleep(seconds)
        finally:
            if mode == "absent":
                self.absent -= 1
                if not self.absent:
                    await self.start()
            else:
                setattr(self, mode, getattr(self, mode) - 1)
