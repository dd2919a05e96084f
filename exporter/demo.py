"""`zaroz-exporter demo`: the simulator's events route and the exporter tailing it, on loopback."""

from __future__ import annotations

import argparse
import asyncio
import logging

from exporter.serve import run_until_stopped, start
from exporter.sim.config import SimConfig
from exporter.sim.faults import FaultKind, FaultPlan
from exporter.sim.route import LiveFeed, RouteServer

log = logging.getLogger("exporter.demo")
DEMO_FAULT_RATE = 0.02  # per request and fault kind, when --faults is on
DEMO_FAULT_KINDS = (FaultKind.STATUS, FaultKind.DROP, FaultKind.TRUNCATE, FaultKind.SLOW)


async def run(args: argparse.Namespace) -> None:
    config = SimConfig(seed=args.seed, workloads=args.workloads, arrival_rate=args.rate)
    rates = {k: DEMO_FAULT_RATE for k in DEMO_FAULT_KINDS} if args.faults else None
    route = RouteServer(config.workload_list(), faults=FaultPlan(rates=rates, seed=args.seed))
    feed = LiveFeed(route, config)
    route_url = await route.start(*_host_port(args.route_listen))
    feed.start()
    try:
        running = await start(args, route_url, None)
        print(
            f"zaroz exporter demo\n"
            f"  simulated events route  {route_url}/v1/workloads\n"
            f"  exporter                {running.url}/\n"
            f"  metrics                 {running.url}/metrics\n"
            f"  readiness               {running.url}/readyz\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        await run_until_stopped(running, args.duration)
    finally:
        await feed.stop()
        await route.stop()


def _host_port(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(args: argparse.Namespace) -> int:
    asyncio.run(run(args))
    return 0
