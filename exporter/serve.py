"""`zaroz-exporter serve`: tail the events route and serve the metrics until stopped."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import signal
import time
from dataclasses import dataclass

import aiohttp

from exporter.pipeline import Pipeline
from exporter.server import MetricsServer, start_site
from exporter.sinks.metrics.route import RouteMetrics
from exporter.sources.backoff import Backoff
from exporter.sources.route import RouteClient
from exporter.sources.tailer import TailSupervisor
from exporter.sources.token import TokenFile

log = logging.getLogger("exporter.serve")
EXPIRE_INTERVAL_S = 60.0


@dataclass
class Running:
    """A started exporter: what tests and the demo need to reach and stop it."""

    url: str
    pipeline: Pipeline
    supervisor: TailSupervisor
    runner: object
    session: aiohttp.ClientSession
    expiry: asyncio.Task[None]

    async def stop(self) -> None:
        self.expiry.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.expiry
        await self.supervisor.stop()
        await self.runner.cleanup()  # type: ignore[attr-defined]
        await self.session.close()


async def _expire_loop(pipeline: Pipeline) -> None:
    """Idle-unit sweeps on the wall clock; the model itself never reads a clock."""
    while True:
        await asyncio.sleep(EXPIRE_INTERVAL_S)
        pipeline.expire(time.time_ns())


async def start(args: argparse.Namespace, events_url: str, workloads: list[str] | None,
                token_file: str | None = None) -> Running:
    if not 1 <= args.page_limit <= 1000:
        raise SystemExit("--page-limit must be within 1..1000")
    if not 0 <= args.wait <= 60:
        raise SystemExit("--wait must be within 0..60")
    pipeline = Pipeline(idle_seconds=args.unit_idle_timeout)
    connector = aiohttp.TCPConnector(limit=0)
    session = aiohttp.ClientSession(connector=connector, json_serialize=None)  # type: ignore[arg-type]
    client = RouteClient(session, events_url, TokenFile(token_file) if token_file else None,
                         timeout_margin=args.request_timeout_margin)
    supervisor = TailSupervisor(
        client, pipeline, RouteMetrics(pipeline.registry), workloads or None,
        args.discovery_interval,
        backoff_factory=functools.partial(Backoff, min(0.5, args.backoff_max), args.backoff_max),
        limit=args.page_limit, wait=args.wait,
    )
    server = MetricsServer(pipeline.registry, supervisor.readiness, gzip_level=args.gzip_level)
    runner, url = await start_site(server.app, args.listen)
    await supervisor.start()
    expiry = asyncio.create_task(_expire_loop(pipeline), name="expire")
    return Running(url, pipeline, supervisor, runner, session, expiry)


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
    if not args.events_url:
        raise SystemExit("zaroz-exporter serve: --events-url (or ZAROZ_EXPORTER_EVENTS_URL) "
                         "is required")

    async def go() -> None:
        running = await start(args, args.events_url, args.workload, args.events_token_file)
        log.info("serving metrics", extra={"url": f"{running.url}/metrics",
                                           "events_url": args.events_url})
        await run_until_stopped(running)

    asyncio.run(go())
    return 0
