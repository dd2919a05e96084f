"""The OTLP/HTTP collector the exporters send spans to, on the run's own event loop, refusing
(503), slow, or absent (its port closed) while the schedule says so; it keeps every span id it
accepted, and from which process each time, so that a span received twice can be explained
(`unexplained_copies`)."""

from __future__ import annotations

import asyncio
import gzip
import time
import zlib
from collections import Counter
from itertools import pairwise
from typing import NamedTuple

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"
LATE_S = 0.5  # half the exporters' OTLP timeout (1 s): an answer this late may be given up on


class Receipt(NamedTuple):
    start: str  # the sending process (fleet.Start.name), from its `service.instance.id`
    late: bool  # answered so late, or to a closed connection, that the sender may send again


def _start_of(resource_spans: object) -> str:
    for kv in resource_spans.resource.attributes:  # type: ignore[attr-defined]
        if kv.key == "service.instance.id":
            return str(kv.value.string_value).rsplit("-", 1)[0]  # the uuid dropped
    return ""


class Collector:
    def __init__(self, port: int) -> None:
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}"
        self.receipts: dict[str, list[Receipt]] = {}  # span id (hex) -> each time accepted
        self.refusing = 0  # windows open; > 0: answer 503
        self.slow = 0
        self.absent = 0
        self.answers: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        began, slow = time.monotonic(), bool(self.slow)
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
        transport = request.transport
        late = (slow or time.monotonic() - began >= LATE_S or transport is None
                or transport.is_closing())
        for rs in req.resource_spans:
            start = _start_of(rs)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.receipts.setdefault(s.span_id.hex(), []).append(Receipt(start, late))
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


def unexplained_copies(receipts: dict[str, list[Receipt]], ends: dict[str, tuple[int, str | None]]
                       ) -> list[str]:
    """The spans received again where nothing explains it. `ends`: each process's epoch and how
    it ended (fleet.Start). A copy is explained by the earlier answer coming late (the sender's
    timeout ran out: it sends again); by a reshard between the two; by two shards sending it
    after any reshard (the old owner sends what its checkpoint held, the new one makes it
    again); or by the earlier sender ending uncleanly (killed, crashed, or stopped on a full
    disk: what it sent after its last save is sent again after its start). Anything else, a
    process sending a span twice or a clean stop's successor sending what was saved as sent, is
    a copy no fault made."""
    out = []
    for sid, got in receipts.items():
        for a, b in pairwise(got):
            if a.late:
                continue
            epoch_a, end_a = ends.get(a.start, (-1, None))
            epoch_b, _ = ends.get(b.start, (-1, None))
            if a.start != b.start and (epoch_a != epoch_b or end_a != "clean"):
                continue
            if a.start.rsplit("-", 1)[0] != b.start.rsplit("-", 1)[0] and epoch_b > 0:
                # Two shards after a reshard: one sending what its checkpoint held from an
                # earlier shard count, the workload's new owner making it again.
                continue
            out.append(f"span {sid}: sent by {a.start}, then again by {b.start}"
                       + (" (the same process)" if a.start == b.start
                          else f" after {a.start} stopped cleanly"))
    return out
