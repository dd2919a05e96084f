"""The HTTP server: /metrics, /healthz, /readyz and the overview page (aiohttp)."""

from __future__ import annotations

import logging
import ssl
import time
import zlib
from collections.abc import Callable

from aiohttp import web

from exporter.overview.web import Overview
from exporter.sinks.metrics.exposition import CONTENT_TYPES, Format, coalesce, negotiate
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.pbprime import prime
from exporter.wiring.state.checkpoint import BeginsSaves, CheckpointError, render_checkpointed_async

Readiness = Callable[[], tuple[bool, str]]
log = logging.getLogger("exporter.web.app")


def _gone(request: web.Request) -> bool:
    """The scraper has hung up (its scrape timeout passed): aiohttp runs the handler on regardless,
    and a scraper that keeps timing out would queue renders no one reads behind each other."""
    transport = request.transport
    return transport is None or transport.is_closing()


def _accepts_gzip(header: str | None) -> bool:
    if not header:
        return False
    for part in header.split(","):
        fields = [f.strip() for f in part.split(";")]
        if fields[0].lower() in ("gzip", "*"):
            return not any(f.replace(" ", "") in ("q=0", "q=0.0", "q=0.00") for f in fields[1:])
    return False


def _server_timing(start: float, primed: float, rendered: float, taken: float, ended: float,
                   settled: float, resumed: float) -> str:
    """Where a scrape's wait went, in ms (bench.fleet reads it): priming, taking the checkpoint,
    rendering, the write in the writer thread, its one hop back to the loop (which the render
    holds up while it runs) and the scrape's resumption after it."""
    steps = (("prime", primed - start), ("take", taken - primed), ("render", rendered - taken),
             ("write", ended - taken), ("hop", settled - max(ended, rendered)),
             ("resume", resumed - settled))
    return ", ".join(f"{name};dur={max(s, 0.0) * 1e3:.2f}" for name, s in steps)


class MetricsServer:
    def __init__(
        self,
        registry: Registry,
        readiness: Readiness | None = None,
        *,
        gzip_level: int = 1,
        links: dict[str, str] | None = None,
        checkpointer: BeginsSaves | None = None,
        held: Callable[[], list[str]] | None = None,
        standard_metrics: bool = False,
    ) -> None:
        """`standard_metrics`: add the process_* and python_* families (see
        `sinks.metrics.standard`); off for benchmarks that compare bare expositions."""
        self.registry = registry
        if standard_metrics:
            from exporter.sinks.metrics.standard import StandardMetrics

            registry.extras.append(StandardMetrics())
        self.checkpointer = checkpointer
        self.held = held
        self.readiness = readiness or (lambda: (True, "no sources"))
        self.gzip_level = gzip_level
        self.links = links or {}
        self._series = registry.gauge("zaroz_exporter_series").labels()
        self._duration = registry.gauge("zaroz_exporter_last_scrape_duration_seconds").labels()
        self._bytes = registry.gauge("zaroz_exporter_last_scrape_bytes").labels()
        self.app = web.Application()
        self.overview = Overview(registry, self.readiness, extra_links=self.links)
        self.overview.install(self.app)  # `/`, /api/overview, dashboards' JSON, docs
        self.app.router.add_get("/metrics", self.metrics)
        self.app.router.add_get("/healthz", self.healthz)
        self.app.router.add_get("/readyz", self.readyz)

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        """Renders what changed ahead, in slices that yield (pbprime.py), then the whole
        exposition before the next await (so it is exactly the state a checkpoint saved: what
        is left is what changed meanwhile, and joining cached bytes), then streams it chunk by
        chunk."""
        start = time.perf_counter()
        fmt = negotiate(request.headers.get("Accept"))
        gz = _accepts_gzip(request.headers.get("Accept-Encoding"))
        pb = fmt is Format.PROTOBUF
        if _gone(request):
            return web.Response(status=499)  # never sent: nobody is there to read it
        await prime(self.registry, protobuf=pb, text=not pb)
        if _gone(request):  # what prime rendered stays cached for the next scrape
            return web.Response(status=499)
        primed = time.perf_counter()
        rendered: list[float] = []
        # From here to the rendered exposition, no await (render_checkpointed_async: it awaits
        # only the checkpoint's write, once the exposition is rendered, before it is sent).
        if self.held is not None:
            self.registry.hold(self.held())
        try:
            chunks = await render_checkpointed_async(self.registry, fmt, self.checkpointer,
                                                     rendered)
        except CheckpointError as e:
            log.error("scrape refused: the checkpoint could not be saved", extra={"error": str(e)})
            return web.Response(status=503, text=f"checkpoint failed: {e}\n")
        resp = web.StreamResponse(headers={"Content-Type": CONTENT_TYPES[fmt]})
        hops = getattr(self.checkpointer, "hops", None)
        if hops is not None and rendered:
            resp.headers["Server-Timing"] = _server_timing(start, primed, rendered[0], *hops)
        if gz:
            resp.headers["Content-Encoding"] = "gzip"
            comp = zlib.compressobj(self.gzip_level, zlib.DEFLATED, 31)
        await resp.prepare(request)
        size = 0
        try:
            for data in coalesce(chunks):  # per-object families come as many small pieces
                size += len(data)
                await resp.write(comp.compress(data) if gz else data)
            if gz:
                await resp.write(comp.flush())
            await resp.write_eof()
        except ConnectionResetError:  # hung up while it was sent: as if it had not asked
            log.debug("scrape abandoned by the scraper while it was sent")
            return resp
        self._bytes.set(size)
        self._duration.set(time.perf_counter() - start)
        self.overview.scraped()
        self._by_source()
        return resp

    def _by_source(self) -> None:
        """zaroz_exporter_series and the per-source series/render seconds of the scrape just
        sent (one walk of the families)."""
        series = self.registry.gauge("zaroz_exporter_source_series")
        render_s = self.registry.gauge("zaroz_exporter_source_render_seconds")
        by_source = self.registry.series_by_source()
        self._series.set(sum(by_source.values()))
        for source, n in by_source.items():
            series.labels(source).set(n)
        for source, s in self.registry.render_seconds.items():
            render_s.labels(source).set(s)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
        ok, detail = self.readiness()
        text = ("ok" if ok else "not ready") + f": {detail}\n"
        return web.Response(status=200 if ok else 503, text=text)


async def start_site(app: web.Application, listen: str, ssl_context: ssl.SSLContext | None = None
                     ) -> tuple[web.AppRunner, str]:
    """Binds `host:port` (port 0 picks one) and returns the runner and the URL it serves on
    (https with `ssl_context`)."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, int(port), ssl_context=ssl_context).start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1]
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    scheme = "https" if ssl_context is not None else "http"
    return runner, f"{scheme}://{shown}:{bound}"
