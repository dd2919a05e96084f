"""`zaroz-exporter serve`: tail the events route and watch UnitSignals, serve the metrics."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from exporter.commands.collector import STEP_S, Collector, tune
from exporter.commands.config import ServeConfig
from exporter.commands.errors import ConfigError
from exporter.commands.startfrom import prepare_start
from exporter.model.unitsignals import UnitSignalModel
from exporter.sinks.metrics.checkpoint import CheckpointMetrics
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.route import RouteMetrics
from exporter.sinks.metrics.selection import HIDDEN_BECAUSE
from exporter.sinks.metrics.webhook import WebhookMetrics
from exporter.sources.backoff import Backoff
from exporter.sources.intake import Intake
from exporter.sources.ports import Source
from exporter.sources.route import RouteClient
from exporter.sources.tailer import TailSupervisor
from exporter.sources.tasks import cancel, supervised
from exporter.sources.token import TokenFile
from exporter.sources.webhook import SecretFiles, WebhookReceiver
from exporter.vocabulary import WORKLOAD_DROP_REASONS
from exporter.web.app import MetricsServer, start_site
from exporter.web.security import WebSecurity
from exporter.wiring import lifetime
from exporter.wiring.events import Pipeline
from exporter.wiring.expiry import ExpiryClock
from exporter.wiring.state.checkpoint import Checkpointer, CheckpointError
from exporter.wiring.state.commits import GroupCommit
from exporter.wiring.unitsignals import NamespaceHandler, SignalMemory, build_cluster

log = logging.getLogger("exporter.commands.serve")
TRACES_SHUTDOWN_S = 1.0  # an unreachable collector never delays exit by more than ~1.5 s


@dataclass
class Running:
    """A started exporter: what tests and the demo need to reach and stop it."""

    url: str
    pipeline: Pipeline
    # What start() opened, closed in the reverse order by stop(): the loops, the sources, the
    # last checkpoint, the listeners, the HTTP session, the trace sink, the state dir's lock.
    opened: contextlib.AsyncExitStack
    supervisor: TailSupervisor | None = None
    kube: Any = None  # exporter.sources.kube.reflector.KubeSource
    checkpointer: Checkpointer | None = None
    # Every save goes through it, so that a webhook delivery is answered once one covers it.
    commits: GroupCommit | None = None
    # Workloads whose log came from the checkpoint, exposed before it was saved: never held.
    restored: frozenset[str] = frozenset()
    webhook_url: str | None = None  # --webhook-listen
    # Every source started (the route's tailers, the UnitSignal watch, the webhook intake).
    sources: list[Source] = field(default_factory=list)
    intake: Intake | None = None  # --webhook-secret-file: told of the workloads dropped

    def readiness(self) -> tuple[bool, str]:
        parts = [s.readiness() for s in self.sources]
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
                and (t.start_head is None or t.cursor < t.start_head)]

    def caught_up(self, workload: str) -> bool:
        """The workload's log is applied through the route's head, as the route said it
        recently (a route that cannot be reached may hold events: that is no idle log).
        Webhooks only: nothing waits behind a gap."""
        t = self.supervisor.tailers.get(workload) if self.supervisor is not None else None
        if t is None:
            return self.supervisor is None
        fresh = t.last_success is not None and time.time() - t.last_success < 2 * t.wait + 30
        return (fresh and t.caught_up and t.head_seq is not None
                and t.cursor >= t.head_seq)

    def drop_departed(self, retention_ns: int, wall_ns: int) -> None:
        """Drop the workloads gone from the route's list for longer than the retention
        (wiring/lifetime.py); judged only once the route has listed them since the start."""
        sup = self.supervisor
        if sup is None or not sup.discovered:
            return
        gone = lifetime.sweep(self.pipeline, sup.tailers, retention_ns, wall_ns)
        if gone:  # one seen again is new: held until caught up, as any log with no checkpoint
            self.restored = self.restored.difference(gone)
            if self.intake is not None:
                self.intake.forget(gone)

    def save(self) -> None:
        """A checkpoint of now, between scrapes (periodically and at shutdown), with the
        workloads held as of now (a scrape updates them too); failures are logged by save."""
        if self.commits is not None:
            self.pipeline.registry.hold(self.held())
            try:
                self.commits.save()
            except CheckpointError:
                pass  # counted and logged by the checkpointer
            except Exception as e:  # counted and logged as a failed save, never raised
                assert self.checkpointer is not None
                self.checkpointer.failed(e)

    async def save_async(self) -> bool:
        """`save`, its write off the event loop (the periodic checkpoint): False when it
        failed (counted and logged)."""
        if self.commits is None:
            return True
        await self.commits.take_ahead()
        self.pipeline.registry.hold(self.held())
        try:
            await self.commits.begin_save()()
        except CheckpointError:
            return False  # counted and logged by the checkpointer
        except Exception as e:  # counted and logged as a failed save, never raised
            assert self.checkpointer is not None
            self.checkpointer.failed(e)
            return False
        return True

    async def stop(self) -> None:
        """Stops the loops and the sources (the last started first: the intake's gap checks
        ask the tailers), saves a last checkpoint of everything applied, then closes the
        listeners, the session and the trace sink, and lets the state directory go last:
        `opened` holds them all in that order."""
        await self.opened.aclose()


def _trace_sink(config: ServeConfig) -> Any:
    """Traces when --otlp-endpoint or the standard OTEL_* endpoint variables ask for them."""
    from exporter.sinks.otelenv import traces_enabled

    if not (config.otlp_endpoint or traces_enabled()):
        return None
    from exporter.sinks.traces import otlp

    batching = otlp.TraceConfig(max_queue_size=config.otlp_max_queue_size,
                                max_export_batch_size=config.otlp_batch_size,
                                max_pending=config.otlp_max_pending_spans)
    sink = otlp.TraceSink.from_env(config.otlp_endpoint or None, batching)
    log.info("exporting traces", extra={"endpoint": config.otlp_endpoint or "from OTEL_* env"})
    return sink


def _select_families(pipeline: Pipeline, families: Any) -> None:
    """--metric-allowlist/-denylist/-opt-in-list, before anything is recorded."""
    registry = pipeline.registry
    registry.select(families.included)
    for pattern in families.unmatched(registry.families):
        log.warning("metric list pattern matches no family", extra={"pattern": pattern})
    hidden = [name for name in registry.families if name in registry.hidden]
    for why, names in families.why_hidden(hidden).items():
        log.info(f"metric families not exported ({HIDDEN_BECAUSE[why]})",
                 extra={"families": ",".join(names)})


async def _expire_loop(running: Running, interval: float, retention: float) -> None:
    """Idle-unit sweeps by each workload's event clock (wiring/expiry.py), in slices, after
    dropping the workloads gone from the route for longer than `retention` seconds (0: never;
    wiring/lifetime.py); the wall time of the sweep is read here, never in the model."""
    clock = ExpiryClock()
    while True:
        await asyncio.sleep(interval)
        if retention > 0:
            running.drop_departed(int(retention * 1e9), time.time_ns())
        for _ in clock.sweep_steps(running.pipeline, running.caught_up, time.time_ns()):
            await asyncio.sleep(0)  # 100k units are judged in slices: the loop stays free


async def _collector_loop(running: Running, interval: float) -> None:
    """The long-lived heap frozen out of the cyclic collector's walks (commands/collector.py):
    first once every source is ready (checked every second), then every `interval`."""
    tune()
    collector = Collector()
    while not collector.step(running.ready()):
        await asyncio.sleep(1.0)
    log.info("long-lived heap frozen out of the cyclic collector",
             extra={"objects": gc.get_freeze_count()})
    while True:
        await asyncio.sleep(interval)
        collector.step(True)


async def _checkpoint_loop(running: Running, interval: float, *,
                           sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                           clock: Callable[[], float] = time.monotonic,
                           backoff: Backoff | None = None) -> None:
    """A save once `interval` seconds have passed since the last one taken (a scrape's and a
    delivery's count too). A scrape commits what changed since the last save before it is
    sent, so this bounds a scrape's own commit to an interval's changes whatever the scrape
    interval, and with it the scrape's wait. After a failed save the next one waits longer
    (backoff to 30 s): a full disk is then not retried and logged several times a second by
    this loop (scrapes still try theirs)."""
    commits = running.commits
    assert commits is not None
    backoff = backoff or Backoff(interval, max(interval, 30.0))
    delay = interval
    while True:
        await sleep(delay)
        due = commits.last_taken + interval - clock()
        if due > 0 and not backoff.failures:
            delay = due  # a scrape or a delivery saved meanwhile
            continue
        if await running.save_async():
            backoff.reset()
            delay = interval
        else:
            delay = backoff.next(floor=interval)


def _cluster_model(config: ServeConfig, pipeline: Pipeline) -> UnitSignalModel | None:
    """The UnitSignal model, when --kube allows it and a cluster is configured: made before
    the checkpoint is loaded, which restores its memory."""
    if config.kube_access is None:
        if config.kube != "off":
            log.info("no Kubernetes configuration: UnitSignals are not watched",
                     extra={"reason": config.kube_skipped})
        return None
    model, _ = build_cluster(pipeline.registry, list(config.unitsignal_labels_allowlist),
                             traces=pipeline.traces)
    return model


def _kube_source(config: ServeConfig, session: aiohttp.ClientSession, pipeline: Pipeline,
                 owns: Callable[[str], bool] | None, backoff: Callable[[], Backoff],
                 model: UnitSignalModel | None) -> Any:
    """The UnitSignal watch feeding `model` (None: UnitSignals are not watched)."""
    access = config.kube_access
    if access is None or model is None:
        return None
    from exporter.sinks.metrics.kube import KubeMetrics, scope_label
    from exporter.sources.kube.api import KubeApi
    from exporter.sources.kube.reflector import KubeSource

    metrics = KubeMetrics(pipeline.registry)
    source = KubeSource(
        KubeApi(session, access, typed=True),
        lambda ns: NamespaceHandler(model, ns, owns, metrics.decoded(scope_label(ns))),
        metrics, namespaces=list(config.namespace) or None,
        label_selector=config.label_selector or None, backoff_factory=backoff,
        watch_list=config.kube_watch_list,
        died=pipeline.registry.counter("zaroz_exporter_task_restarts_total").labels("kube").inc,
    )
    log.info("watching UnitSignals", extra={"api": access.base_url, "source": access.source,
                                            "namespaces": ",".join(config.namespace) or "*",
                                            "watch_list": config.kube_watch_list})
    return source


async def start(config: ServeConfig) -> Running:
    """Start the exporter `config` describes. Whatever fails on the way closes what was
    opened (in the reverse order) and raises; a listener lost since `from_args` bound it
    raises ConfigError."""
    async with contextlib.AsyncExitStack() as opened:
        running = await _start(config, opened)
        running.opened = opened.pop_all()
    return running


async def _start(config: ServeConfig, opened: contextlib.AsyncExitStack) -> Running:
    shard = config.shard_config
    checkpointer: Checkpointer | None = None

    def let_go() -> None:  # the state dir's lock, after everything that writes in it
        if checkpointer is not None:
            checkpointer.close()

    opened.callback(let_go)
    traces = _trace_sink(config)
    if traces is not None:  # flushing may block on the collector: not on the loop
        opened.push_async_callback(asyncio.to_thread, traces.shutdown, TRACES_SHUTDOWN_S)
    pipeline = Pipeline(Registry(native=config.native), idle_seconds=config.unit_idle_timeout,
                        traces=traces)
    _select_families(pipeline, config.family_filter)
    pipeline.registry.gauge("zaroz_exporter_shard").labels().set(shard.index)
    pipeline.registry.gauge("zaroz_exporter_shards").labels().set(shard.total)
    dropped = pipeline.registry.counter("zaroz_exporter_workloads_dropped_total")
    for reason in WORKLOAD_DROP_REASONS:  # at 0 from the start (a restore continues them)
        dropped.labels(reason)
    owns = shard.owns if shard.total > 1 else None
    backoff = functools.partial(Backoff, min(0.5, config.backoff_max), config.backoff_max)
    webhook_metrics = WebhookMetrics(pipeline.registry)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    opened.push_async_callback(session.close)
    supervisor = client = None
    if config.events_url:
        token = TokenFile(config.events_token_file) if config.events_token_file else None
        client = RouteClient(session, config.events_url, token,
                             timeout_margin=config.request_timeout_margin)
    restored: frozenset[str] = frozenset()
    model = _cluster_model(config, pipeline)
    try:
        if config.state_dir:  # locked now: a second exporter on it ends here, in one line
            memory = None if model is None else SignalMemory(
                model, owns, list(config.namespace) or None)
            checkpointer = Checkpointer(config.state_dir, pipeline,
                                        CheckpointMetrics(pipeline.registry), shard=shard,
                                        signals=memory)
            checkpointer.lock()  # whichever --start-from: not only at a load or first save
        start_cursor = prepare_start(config.start_from, checkpointer, client)
        if checkpointer is not None and config.start_from == "checkpoint":
            restored = frozenset(pipeline.logs) - checkpointer.held_at_save
    except (CheckpointError, ValueError) as e:
        flag, value = (("--state-dir", config.state_dir) if isinstance(e, CheckpointError)
                       else ("--start-from", config.start_from))
        raise ConfigError(flag, value, str(e)) from None
    commits = GroupCommit(checkpointer) if checkpointer is not None else None
    if client is not None:
        supervisor = TailSupervisor(
            client, pipeline, RouteMetrics(pipeline.registry), list(config.workload) or None,
            config.discovery_interval, backoff_factory=backoff, owns=owns,
            start_cursor=start_cursor, limit=config.page_limit, wait=config.wait,
            poll_interval=config.poll_interval,
            gate=None if commits is None else commits.gate,  # a waiting scrape goes first
        )
    kube = _kube_source(config, session, pipeline, owns, backoff, model)
    running_box: list[Running] = []
    server = MetricsServer(pipeline.registry, lambda: running_box[0].readiness(),
                           gzip_level=config.gzip_level, checkpointer=commits,
                           held=lambda: running_box[0].held(),
                           standard_metrics=True)
    intake = None
    webhook_app = None
    if config.webhook_secret_file:
        intake = Intake(pipeline, webhook_metrics, supervisor, grace=config.webhook_gap_grace,
                        give_up_after=config.webhook_gap_give_up)
        webhook_app = webhook_app_for(config, server)
        WebhookReceiver(intake, SecretFiles(list(config.webhook_secret_file), webhook_metrics),
                        webhook_metrics, tolerance_s=config.webhook_tolerance,
                        max_body=config.webhook_max_body, durability=commits,
                        ).install(webhook_app)
    config.web_security.install(server.app)
    url = await _listen(opened, server.app, "--listen", config.listen, config.web_security)
    running = Running(url, pipeline, opened, supervisor, kube, checkpointer=checkpointer,
                      commits=commits, restored=restored, intake=intake)
    if webhook_app is not None and webhook_app is not server.app:
        assert config.webhook_listen is not None and config.webhook_security is not None
        running.webhook_url = await _listen(opened, webhook_app, "--webhook-listen",
                                            config.webhook_listen, config.webhook_security)
    running_box.append(running)
    export = _metrics_export(config, pipeline, checkpointer, commits,
                             lambda: running_box[0].held())
    if export is not None:  # after the last save: its final export, then its client closed
        opened.push_async_callback(asyncio.to_thread, export.shutdown)
        opened.push_async_callback(export.final)
    # The last save runs once the sources have stopped. Registered only now: a start that
    # failed before this point (a checkpoint it could not read, a port lost) writes nothing.
    opened.callback(running.save)
    for source in (supervisor, kube, intake):
        if source is not None:
            running.sources.append(source)
            opened.push_async_callback(source.stop)  # also when its start fails half-way
            await source.start()
    loops: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {
        "expire": functools.partial(_expire_loop, running, config.unit_expiry_interval,
                                    config.workload_retention),
        "collector": functools.partial(_collector_loop, running, STEP_S)}
    if export is not None:
        loops["otlp_metrics"] = export.run
    if checkpointer is not None and config.checkpoint_interval > 0:
        loops["checkpoint"] = functools.partial(_checkpoint_loop, running,
                                                config.checkpoint_interval)
    for name, loop in loops.items():  # each restarted, counted and logged if it dies
        died = pipeline.registry.counter("zaroz_exporter_task_restarts_total").labels(name).inc
        task = supervised(name, loop, died, Backoff(1.0, 60.0))
        opened.push_async_callback(cancel, asyncio.create_task(task, name=name))
    return running


def _metrics_export(config: ServeConfig, pipeline: Pipeline, checkpointer: Checkpointer | None,
                    commits: GroupCommit | None, held: Callable[[], list[str]]) -> Any:
    """The OTLP metrics export when --otlp-metrics-endpoint or the OTEL_* variables ask for it
    (commands/otlpmetrics.py), else None."""
    from exporter.sinks.metrics.otlp.transport import enabled, transport

    if not enabled(config.otlp_metrics_endpoint):
        return None
    from exporter.commands.otlpmetrics import (
        ExportConfig,
        MetricsExport,
        default_instance,
        resource,
    )
    from exporter.sinks.metrics.otlp.starts import StartTimes

    shard = config.shard_config
    instance = config.instance or default_instance(shard, os.environ)
    sender = transport(config.otlp_metrics_endpoint)
    starts = checkpointer.starts if checkpointer is not None else StartTimes()
    export = MetricsExport(pipeline.registry, sender, starts,
                           resource(instance, shard, os.environ),
                           ExportConfig(config.otlp_metrics_interval,
                                        config.otlp_metrics_max_points),
                           commits, held)
    log.info("exporting metrics over OTLP", extra={
        "endpoint": sender.endpoint, "interval_s": config.otlp_metrics_interval,
        "instance": instance})
    return export


def webhook_app_for(config: ServeConfig, server: MetricsServer) -> web.Application:
    """The app the webhook goes on: the metrics listener's, or with --webhook-listen one of its
    own that serves only the webhook and the health endpoints (for the Ingress' checks)."""
    if not config.webhook_listen:
        return server.app
    app = web.Application()
    app.router.add_get("/healthz", server.healthz)
    app.router.add_get("/readyz", server.readyz)
    assert config.webhook_security is not None  # from_args loads it with --webhook-listen
    config.webhook_security.install(app)
    return app


async def _listen(opened: contextlib.AsyncExitStack, app: web.Application, flag: str,
                  listen: str, security: WebSecurity) -> str:
    """Serve `app` on `listen` until `opened` closes; the URL it answers on."""
    try:
        runner, url = await start_site(app, listen, security.ssl)
    except OSError as e:  # lost a race since ServeConfig.from_args bound it
        raise ConfigError(flag, listen, f"cannot listen: {e.strerror or e}") from None
    opened.push_async_callback(runner.cleanup)
    return url


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


def main(config: ServeConfig) -> int:
    async def go() -> None:
        running = await start(config)
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
