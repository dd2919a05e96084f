"""`zaroz-exporter demo`: the simulator's events route and the exporter tailing it, on loopback."""

from __future__ import annotations

import argparse
import asyncio
import logging

from exporter.serve import run_until_stopped, start
from exporter.sim.cluster import ClusterMirror
from exporter.sim.config import SimConfig
from exporter.sim.faults import FaultKind, FaultPlan
from exporter.sim.kube import KubeEmulator
from exporter.sim.route import LiveFeed, RouteServer

log = logging.getLogger("exporter.demo")
DEMO_FAULT_RATE = 0.02  # per request and fault kind, when --faults is on
DEMO_FAULT_KINDS = (FaultKind.STATUS, FaultKind.DROP, FaultKind.TRUNCATE, FaultKind.SLOW)


async def run(args: argparse.Namespace) -> None:
    config = SimConfig(seed=args.seed, workloads=args.workloads, arrival_rate=args.rate)
    rates = {k: DEMO_FAULT_RATE for k in DEMO_FAULT_KINDS} if args.faults else None
    route = RouteServer(config.workload_list(), faults=FaultPlan(rates=rates, seed=args.seed))
    kube = KubeEmulator(seed=args.seed, bookmark_interval_s=10.0)
    mirror = ClusterMirror(kube, seed=args.seed)
    feed = LiveFeed(route, config, listeners=[mirror.apply])
    route_url = await route.start(*_host_port(args.route_listen))
    kube_url = await kube.start()
    feed.start()
    try:
        running = await start(demo_serve_args(args, route_url, kube_url))
        print(
            f"zaroz exporter demo\n"
            f"  simulated events route  {route_url}/v1/workloads\n"
            f"  simulated Kubernetes    {kube_url}/apis/units.zaroz.cloud/v1/unitsignals\n"
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
        await kube.stop()


def demo_serve_args(args: argparse.Namespace, route_url: str,
                    kube_url: str) -> argparse.Namespace:
    """The demo's exporter is `serve` pointed at the simulated route and API server."""
    return argparse.Namespace(
        **vars(args), events_url=route_url, events_token_file=None, workload=[],
        kube="on", kube_api_url=kube_url, kube_token_file=None, kubeconfig=None,
        kube_context=None, namespace=[], label_selector=None, unitsignal_labels_allowlist=[],
    )


def _host_port(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(args: argparse.Namespace) -> int:
    asyncio.run(run(args))
    return 0
