"""`zaroz-exporter serve`: tail the events route and watch UnitSignals, serve the metrics."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from exporter.cli import native_config
from exporter.commands import config
from exporter.commands.config import ConfigError
from exporter.model.sharding import Shard
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.route import RouteMetrics
from exporter.sinks.metrics.webhook import WebhookMetrics
from exporter.sources.backoff import Backoff
from exporter.sources.intake import Intake
from exporter.sources.route import RouteClient
from exporter.sources.tailer import TailSupervisor
from exporter.sources.tasks import cancel
from exporter.sources.token import TokenFile
from exporter.sources.webhook import SecretFiles, WebhookReceiver
from exporter.web.app import MetricsServer, start_site
from exporter.wiring.checkpoint import Checkpointer, CheckpointError, prepare_start
from exporter.wiring.events import Pipeline
from exporter.wiring.expiry import ExpiryClock
from exporter.wiring.unitsignals import NamespaceHandler, build_cluster

log = logging.getLogger("exporter.commands.serve")
TRACES_SHUTDOWN_S = 1.0  # an unreachable collector never delays exit by more than ~1.5 s


@dataclass
class Running:
    """A started exporter: what tests and the demo need to reach and stop it."""

    url: str
    pipeline: Pipeline
    runner: web.AppRunner
    session: aiohttp.ClientSession
    supervisor: TailSupervisor | None = None
    kube: Any = None  # exporter.sources.kube.reflector.KubeSource
    traces: Any = None  # exporter.sinks.traces.otlp.TraceSink
    intake: Intake | None = None
    checkpointer: Checkpointer | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # Workloads whose log came from the checkpoint, exposed before it was saved: never held.
    restored: frozenset[str] = frozenset()
    webhook_runner: web.AppRunner | None = None  # --webhook-listen
    webhook_url: str | None = None

    def readiness(self) -> tuple[bool, str]:
        parts = [s.readiness() for s in (self.supervisor, self.kube) if s is not None]
        if not parts:
            return True, "no sources"
        return all(ok for ok, _ in parts), "; ".join(d for _, d in parts)

    def ready(self) -> bool:
        return self.readiness()[0]

    def held(self) -> list[str]:
        """Workloads replaying a backlog they have no checkpoint for: their event-log series
        stay out of the exposition until the log is applied through the head the route had at
        the tailer's first page (Registry.hold). Events that arrive after that are live: a
        tailer that never catches up with a fast log is still shown, lagging."""
        if self.supervisor is None:
            return []
        return [w for w, t in self.supervisor.tailers.items()
                if w not in self.restored and not t.caught_up
                and (t.start_head is None or t.log.applied_through < t.start_head)]

    def caught_up(self, workload: str) -> bool:
        """The workload's log is applied through the route's head, as the route said it
        recently (a route that cannot be reached may hold events: that is no idle log).
        Webhooks only: nothing waits behind a gap."""
        t = self.supervisor.tailers.get(workload) if self.supervisor is not None else None
        if t is None:
            return self.supervisor is None
        fresh = t.last_success is not None and time.time() - t.last_success < 2 * t.wait + 30
        return (fresh and t.caught_up and t.head_seq is not None
                and t.log.applied_through >= t.head_seq)

    def checkpoint(self) -> None:
        """Save a checkpoint now (periodically and at shutdown); failures are logged."""
        if self.checkpointer is not None:
            with contextlib.suppress(CheckpointError):
                self.checkpointer.save()

    async def stop(self) -> None:
        """Stops the sources, then saves a last checkpoint of everything applied."""
        if self.intake is not None:
            self.intake.close()
        await cancel(*self.tasks)
        if self.supervisor is not None:
            await self.supervisor.stop()
        if self.kube is not None:
            await self.kube.stop()
        if self.webhook_runner is not None:
            await self.webhook_runner.cleanup()
        await self.runner.cleanup()
        await self.session.close()
        if self.checkpointer is not None:
            self.checkpoint()
            self.checkpointer.close()
        if self.traces is not None:  # flushing may block on the collector: not on the loop
            await asyncio.get_running_loop().run_in_executor(
                None, self.traces.shutdown, TRACES_SHUTDOWN_S)


def _trace_sink(args: argparse.Namespace) -> Any:
    """Traces when --otlp-endpoint or the standard OTEL_* endpoint variables ask for them."""
    from exporter.sinks.traces import otlp

    if not (args.otlp_endpoint or otlp.traces_enabled()):
        return None
    config = otlp.TraceConfig(max_queue_size=args.otlp_max_queue_size,
                              max_export_batch_size=args.otlp_batch_size)
    sink = otlp.TraceSink.from_env(args.otlp_endpoint or None, config)
    log.info("exporting traces", extra={"endpoint": args.otlp_endpoint or "from OTEL_* env"})
    return sink


def _select_families(pipeline: Pipeline, families: Any) -> None:
    """--metric-allowlist/-denylist/-opt-in-list, before anything is recorded."""
    registry = pipeline.registry
    registry.select(families.included)
    for pattern in families.unmatched(registry.families):
        log.warning("metric list pattern matches no family", extra={"pattern": pattern})
    if registry.hidden:
        log.info("metric families not exported", extra={"families": len(registry.hidden)})


async def _expire_loop(running: Running, interval: float) -> None:
    """Idle-unit sweeps by each workload's event clock (wiring/expiry.py); the wall time of
    the sweep is read here, never in the model."""
    clock = ExpiryClock()
    while True:
        await asyncio.sleep(interval)
        clock.sweep(running.pipeline, running.caught_up, time.time_ns())


async def _checkpoint_loop(running: Running, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        running.checkpoint()


def _kube_source(args: argparse.Namespace, session: aiohttp.ClientSession, pipeline: Pipeline,
                 owns: Callable[[str], bool] | None, backoff: Callable[[], Backoff]) -> Any:
    """The UnitSignal watch, when --kube allows it and a cluster is configured."""
    access = args.kube_access  # loaded by config.validate
    if access is None:
        if args.kube != "off":
            log.info("no Kubernetes configuration: UnitSignals are not watched",
                     extra={"reason": getattr(args, "kube_skipped", "")})
        return None
    from exporter.sinks.metrics.kube import KubeMetrics, scope_label
    from exporter.sources.kube.api import KubeApi
    from exporter.sources.kube.reflector import KubeSource

    model, _ = build_cluster(pipeline.registry, args.unitsignal_labels_allowlist,
                             traces=pipeline.traces)
    metrics = KubeMetrics(pipeline.registry)
    source = KubeSource(
        KubeApi(session, access, typed=True),
        lambda ns: NamespaceHandler(model, ns, owns, metrics.decoded(scope_label(ns))),
        metrics, namespaces=args.namespace or None,
        label_selector=args.label_selector or None, backoff_factory=backoff,
    )
    log.info("watching UnitSignals", extra={"api": access.base_url, "source": access.source,
                                            "namespaces": ",".join(args.namespace) or "*"})
    return source


def shard_from(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Shard:
    """--shard, else the ordinal of a StatefulSet pod name, else 0 (ConfigError otherwise)."""
    return config.shard_of(args, environ)


async def start(args: argparse.Namespace) -> Running:
    """Validate (again: idempotent, for callers that built `args` themselves), then start.
    Whatever fails after the session exists closes what was opened and raises ConfigError."""
    config.validate(args)
    shard = args.shard_config
    traces = _trace_sink(args)
    pipeline = Pipeline(Registry(native=native_config(args)), idle_seconds=args.unit_idle_timeout,
                        traces=traces)
    _select_families(pipeline, args.family_filter)
    pipeline.registry["zaroz_exporter_shard"].labels().set(shard.index)
    pipeline.registry["zaroz_exporter_shards"].labels().set(shard.total)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    opened = _Opened(session, traces)
    try:
        running = await _start(args, shard, pipeline, session, traces, opened)
    except BaseException:
        await opened.close()
        raise
    return running


@dataclass
class _Opened:
    """What start() has opened so far, closed again when a later step fails."""

    session: aiohttp.ClientSession
    traces: Any
    checkpointer: Checkpointer | None = None
    runner: web.AppRunner | None = None
    webhook_runner: web.AppRunner | None = None

    async def close(self) -> None:
        for r in (self.webhook_runner, self.runner):
            if r is not None:
                await r.cleanup()
        await self.session.close()
        if self.checkpointer is not None:
            self.checkpointer.close()
        if self.traces is not None:
            self.traces.shutdown(TRACES_SHUTDOWN_S)


async def _start(args: argparse.Namespace, shard: Shard, pipeline: Pipeline,
                 session: aiohttp.ClientSession, traces: Any, opened: _Opened) -> Running:
    owns = shard.owns if shard.total > 1 else None
    backoff = functools.partial(Backoff, min(0.5, args.backoff_max), args.backoff_max)
    webhook_metrics = WebhookMetrics(pipeline.registry)
    checkpointer = (Checkpointer(args.state_dir, pipeline, webhook_metrics)
                    if args.state_dir else None)
    opened.checkpointer = checkpointer
    supervisor = client = None
    if args.events_url:
        token = TokenFile(args.events_token_file) if args.events_token_file else None
        client = RouteClient(session, args.events_url, token,
                             timeout_margin=args.request_timeout_margin)
    restored: frozenset[str] = frozenset()
    try:
        start_cursor = prepare_start(args.start_from, checkpointer, client)
        if checkpointer is not None and args.start_from == "checkpoint":
            restored = frozenset(pipeline.logs) - checkpointer.held_at_save
    except (CheckpointError, ValueError) as e:
        flag, value = (("--state-dir", args.state_dir) if isinstance(e, CheckpointError)
                       else ("--start-from", args.start_from))
        raise ConfigError(flag, value, str(e)) from None
    if client is not None:
        supervisor = TailSupervisor(
            client, pipeline, RouteMetrics(pipeline.registry), args.workload or None,
            args.discovery_interval, backoff_factory=backoff, owns=owns,
            start_cursor=start_cursor, limit=args.page_limit, wait=args.wait,
        )
    kube = _kube_source(args, session, pipeline, owns, backoff)
    running_box: list[Running] = []
    server = MetricsServer(pipeline.registry, lambda: running_box[0].readiness(),
                           gzip_level=args.gzip_level, checkpointer=checkpointer,
                           held=lambda: running_box[0].held(),
                           standard_metrics=True)
    intake = None
    webhook_app = None
    if args.webhook_secret_file:
        intake = Intake(pipeline, webhook_metrics, supervisor, grace=args.webhook_gap_grace,
                        give_up_after=args.webhook_gap_give_up)
        webhook_app = webhook_app_for(args, server)
        WebhookReceiver(intake, SecretFiles(args.webhook_secret_file, webhook_metrics),
                        webhook_metrics, tolerance_s=args.webhook_tolerance,
                        max_body=args.webhook_max_body).install(webhook_app)
    args.web_security.install(server.app)
    runner, url = await _listen(server.app, "--listen", args.listen, args.web_security)
    opened.runner = runner
    running = Running(url, pipeline, runner, session, supervisor, kube, traces=traces,
                      intake=intake, checkpointer=checkpointer, restored=restored)
    if webhook_app is not None and webhook_app is not server.app:
        running.webhook_runner, running.webhook_url = await _listen(
            webhook_app, "--webhook-listen", args.webhook_listen, args.webhook_security)
        opened.webhook_runner = running.webhook_runner
    running_box.append(running)
    if supervisor is not None:
        await supervisor.start()
    if kube is not None:
        kube.start()
    running.tasks.append(asyncio.create_task(
        _expire_loop(running, args.unit_expiry_interval), name="expire"))
    if checkpointer is not None and args.checkpoint_interval > 0:
        running.tasks.append(asyncio.create_task(
            _checkpoint_loop(running, args.checkpoint_interval), name="checkpoint"))
    return running


def webhook_app_for(args: argparse.Namespace, server: MetricsServer) -> web.Application:
    """The app the webhook goes on: the metrics listener's, or with --webhook-listen one of its
    own that serves only the webhook and the health endpoints (for the Ingress' checks)."""
    if not getattr(args, "webhook_listen", None):
        return server.app
    app = web.Application()
    app.router.add_get("/healthz", server.healthz)
    app.router.add_get("/readyz", server.readyz)
    args.webhook_security.install(app)
    return app


async def _listen(app: web.Application, flag: str, listen: str, security: Any
                  ) -> tuple[web.AppRunner, str]:
    try:
        return await start_site(app, listen, security.ssl)
    except OSError as e:  # lost a race since config.validate bound it
        raise ConfigError(flag, listen, f"cannot listen: {e.strerror or e}") from None


async def run_until_stopped(running: Running, duration: float = 0.0) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        if duration > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), duration)
        else:
            await stop.wait()
    finally:
        log.info("shutting down")
        await running.stop()


def main(args: argparse.Namespace) -> int:
    async def go() -> None:
        running = await start(args)
        log.info("serving metrics", extra={"url": f"{running.url}/metrics"})
        if running.webhook_url:
            log.info("serving webhooks", extra={"url": f"{running.webhook_url}/v1/webhooks/events"})
        await run_until_stopped(running)

    try:
        asyncio.run(go())
    except ConfigError as e:
        print(e.line("serve"), file=sys.stderr)
        return 2
    return 0
