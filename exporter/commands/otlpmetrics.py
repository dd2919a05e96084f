"""The OTLP metrics export loop: every interval, what a protobuf scrape would serve, pushed.

The commit rule holds as for a scrape: what changed is taken into a checkpoint save and the
exposition rendered with no await in between, and nothing is sent before that save is durable
(`render_checkpointed_async`, through the same group commit as scrapes and webhook replies). The
rendered chunks are immutable bytes: mapping them onto OTLP and sending runs in a worker
thread, off the event loop.

Cumulative data needs no queue: an export that fails (a receiver down, 429 or 503 beyond the
client's retries, a timeout) is counted and logged, and the next one carries every total again,
so nothing is lost and memory holds one export at most. A request refused as too large (413)
is split in two and each half sent, down to single points.

At shutdown (SIGTERM), once the last checkpoint is saved, a final export sends the totals
applied since the last interval (`final`): through the same commit wait, so it too carries only
durable values, after the one in flight if any, within `FINAL_EXPORT_S`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from exporter import __version__
from exporter.model.sharding import Shard
from exporter.sinks.metrics.exposition import Format
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.otlp import client_model, encode
from exporter.sinks.metrics.otlp.starts import StartTimes
from exporter.sinks.metrics.otlp.transport import MetricsTransport
from exporter.sinks.metrics.pbprime import prime
from exporter.sinks.metrics.state import NOT_RESTORED
from exporter.wiring.state.checkpoint import BeginsSaves, CheckpointError, render_checkpointed_async

log = logging.getLogger("exporter.otlp_metrics")
TOO_LARGE = 413
RESULTS = ("success", "failure", "checkpoint_failed")
FINAL_EXPORT_S = 10.0  # the final export's bound: a receiver away never holds a shutdown longer


def resource(instance: str, shard: Shard, environ: Mapping[str, str]) -> dict[str, str]:
    """Stable across restarts and pod replacements: never a random id (a new one would make
    every series a new one at each restart)."""
    attrs = {"service.name": environ.get("OTEL_SERVICE_NAME") or "zaroz-exporter",
             "service.version": __version__, "service.instance.id": instance,
             "zaroz.shard": str(shard.index)}
    for attr, env in (("k8s.pod.name", "POD_NAME"), ("k8s.namespace.name", "POD_NAMESPACE")):
        if environ.get(env):
            attrs[attr] = environ[env]
    return attrs


def default_instance(shard: Shard, environ: Mapping[str, str]) -> str:
    """--instance when unset: a StatefulSet pod's name (stable, its ordinal in it), else the
    shard ("shard-0"), which a replaced Deployment pod keeps, unlike its name."""
    from exporter.model.sharding import ordinal_from_pod_name

    pod = environ.get("POD_NAME") or ""
    if pod and ordinal_from_pod_name(pod) is not None:
        return pod
    return f"shard-{shard.index}"


@dataclass(frozen=True)
class ExportConfig:
    interval: float
    max_points: int
    exponential: bool = True


class MetricsExport:
    def __init__(self, registry: Registry, transport: MetricsTransport, starts: StartTimes,
                 attrs: Mapping[str, str], config: ExportConfig,
                 commits: BeginsSaves | None = None,
                 held: Callable[[], list[str]] | None = None) -> None:
        self.registry = registry
        self.transport = transport
        self.starts = starts
        self.resource = encode.resource_attributes(attrs)
        self.config = config
        self.commits = commits
        self.held = held
        exports = registry.counter("zaroz_exporter_otlp_metrics_exports_total")
        self._count = {r: exports.labels(r) for r in RESULTS}
        self._last = registry.gauge(
            "zaroz_exporter_otlp_metrics_last_success_timestamp_seconds").labels()
        self._points = registry.gauge("zaroz_exporter_otlp_metrics_points").labels()
        self._restarting = frozenset(NOT_RESTORED) | frozenset(
            n for n in registry.families if n.startswith("zaroz_exporter_otlp_metrics_"))
        self._catalog = frozenset(registry.families)
        self._failing = False
        # The worker thread's send in flight (one at most: an export cancelled at shutdown
        # leaves it running, and the final export waits for it).
        self._inflight: asyncio.Future[tuple[bool, int, str]] | None = None

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.config.interval)
            await self.export()

    async def export(self) -> bool:
        """One export; True when every request was accepted."""
        await prime(self.registry, protobuf=True, text=False)
        if self.held is not None:
            self.registry.hold(self.held())
        try:
            chunks = await render_checkpointed_async(self.registry, Format.PROTOBUF, self.commits)
        except CheckpointError as e:
            self._count["checkpoint_failed"].inc()
            log.error("metrics not exported: the checkpoint could not be saved",
                      extra={"error": str(e)})
            return False
        s = self.starts
        start_of = encode.starts_of(s.snapshot(), s.epoch, s.process_start, self._restarting,
                                     self._catalog)
        now = time.time_ns()
        loop = asyncio.get_running_loop()
        self._inflight = loop.run_in_executor(None, self._send, chunks, start_of, now)
        del chunks  # the thread holds the one export in memory
        ok, points, error = await asyncio.shield(self._inflight)
        self._points.set(points)
        if ok:
            self._count["success"].inc()
            self._last.set(now / 1e9)
            if self._failing:
                log.info("metrics export accepted again", extra={
                    "endpoint": self.transport.endpoint})
            self._failing = False
        else:
            self._count["failure"].inc()
            if not self._failing:  # once per outage: the counter says how long it lasts
                log.warning("metrics export failed; the next export sends every total again",
                            extra={"endpoint": self.transport.endpoint, "error": error})
            self._failing = True
        return ok

    def _send(self, chunks: list[bytes], start_of: encode.StartOf,
              now: int) -> tuple[bool, int, str]:
        """The worker thread's part: map, encode and send (every request, even after one
        failed: the accepted ones' totals are then current)."""
        fams = client_model.raw_families(chunks)
        ms = encode.metrics(fams, now, start_of, self.config.exponential)
        ok, points, error = True, 0, ""
        for req, n in encode.requests(ms, self.config.max_points):
            points += n
            good, why = self._deliver(req, n)
            if not good:
                ok, error = False, why
        return ok, points, error

    def _deliver(self, req: encode.Request, points: int) -> tuple[bool, str]:
        sent = self.transport.send(encode.encode_request(req, self.resource), points)
        if sent.ok:
            return True, ""
        if sent.status == TOO_LARGE:
            parts = encode.split(req)
            if len(parts) > 1:
                results = [self._deliver(p, sum(len(x.points) for x in p)) for p in parts]
                bad = [why for good, why in results if not good]
                return not bad, bad[0] if bad else ""
        return False, sent.error or f"HTTP {sent.status}"

    async def final(self, timeout: float = FINAL_EXPORT_S) -> bool:
        """The export at shutdown, after the last save: every total applied, sent once the
        export in flight (if any) is done; False when it failed or took over `timeout`."""
        try:
            async with asyncio.timeout(timeout):
                if self._inflight is not None and not self._inflight.done():
                    await asyncio.shield(self._inflight)
                return await self.export()
        except TimeoutError:
            log.warning("final metrics export not done in time; the receiver has the totals "
                        "of the last export accepted", extra={
                            "endpoint": self.transport.endpoint, "timeout_s": timeout})
            return False

    def shutdown(self) -> None:
        self.transport.shutdown()


def enabled_from_env() -> bool:
    from exporter.sinks.metrics.otlp.transport import enabled

    return enabled(None, os.environ)
