"""`zaroz-exporter demo`: the simulator's events route and the exporter tailing it, on loopback."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from exporter.commands.config import ServeConfig
from exporter.commands.errors import ConfigError
from exporter.commands.serve import Running, run_until_stopped, start
from exporter.timestamps import parse_rfc3339_ns
from zaroz_sim.cluster import ClusterMirror
from zaroz_sim.config import SimConfig
from zaroz_sim.faults import FaultKind, FaultPlan
from zaroz_sim.kube.emulator import KubeEmulator
from zaroz_sim.route import LiveFeed, RouteServer

log = logging.getLogger("exporter.commands.demo")
DEMO_FAULT_RATE = 0.02  # per request and fault kind, when --faults is on
DEMO_FAULT_KINDS = (FaultKind.STATUS, FaultKind.DROP, FaultKind.TRUNCATE, FaultKind.SLOW)
Listener = Callable[[str, list[dict[str, Any]]], None]


class EventStamp:
    """The simulated API server's clock: the time of the event being mirrored (wall time
    otherwise), so the history written at start keeps its own times in the UnitSignals' stamps
    instead of all being stamped now."""

    def __init__(self) -> None:
        self.ns: int | None = None

    def __call__(self) -> int:
        return time.time_ns() if self.ns is None else self.ns

    def mirrored(self, apply: Listener) -> Listener:
        def each(workload: str, envelopes: list[dict[str, Any]]) -> None:
            for ev in envelopes:
                try:
                    self.ns = parse_rfc3339_ns(ev["occurred_at"])
                except (KeyError, TypeError, ValueError):
                    self.ns = None
                apply(workload, [ev])
            self.ns = None
        return each


KUBE_CONTEXT = "zaroz-demo"


@dataclass
class Kubeconfig:
    """The demo cluster's kubeconfig, for kubectl and any client-go or Python client: in the
    state directory when there is one, else in a temporary directory of its own (removed at
    stop, as is the file)."""

    path: Path
    temporary: bool

    @classmethod
    def write(cls, url: str, state_dir: str | None) -> Kubeconfig:
        if state_dir:
            os.makedirs(state_dir, exist_ok=True)
            path, temporary = Path(state_dir) / "demo-kubeconfig", False
        else:
            path, temporary = Path(tempfile.mkdtemp(prefix="zaroz-demo-")) / "kubeconfig", True
        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": KUBE_CONTEXT, "cluster": {"server": url}}],
            "users": [{"name": KUBE_CONTEXT, "user": {}}],
            "contexts": [{"name": KUBE_CONTEXT,
                          "context": {"cluster": KUBE_CONTEXT, "user": KUBE_CONTEXT}}],
            "current-context": KUBE_CONTEXT,
        }
        # 0600 from the start: a kubeconfig is a credential file, whatever it holds today.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o600)
            yaml.safe_dump(config, f, sort_keys=False)
        return cls(path, temporary)

    def command(self) -> str:
        """The one line to watch the demo's UnitSignals with kubectl."""
        return f"KUBECONFIG={shlex.quote(str(self.path))} kubectl get unitsignals -A -w"

    def remove(self) -> None:
        if self.temporary:
            shutil.rmtree(self.path.parent, ignore_errors=True)
        else:
            self.path.unlink(missing_ok=True)


@dataclass
class Demo:
    """A started demo: the simulated platform and the exporter tailing it."""

    running: Running
    route: RouteServer
    kube: KubeEmulator
    mirror: ClusterMirror
    feed: LiveFeed
    route_url: str
    kube_url: str
    kubeconfig: Kubeconfig

    async def stop(self) -> None:
        await self.running.stop()
        await self.feed.stop()
        await self.route.stop()
        await self.kube.stop()
        self.kubeconfig.remove()


async def start_demo(args: argparse.Namespace) -> Demo:
    config = SimConfig(seed=args.seed, workloads=args.workloads, arrival_rate=args.rate)
    rates = {k: DEMO_FAULT_RATE for k in DEMO_FAULT_KINDS} if args.faults else None
    route = RouteServer(config.workload_list(), faults=FaultPlan(rates=rates, seed=args.seed))
    stamp = EventStamp()
    kube = KubeEmulator(seed=args.seed, bookmark_interval_s=10.0, clock=stamp)
    mirror = ClusterMirror(kube, seed=args.seed)
    feed = LiveFeed(route, config, listeners=[stamp.mirrored(mirror.apply)],
                    history_s=args.history)
    route_url = await route.start(*_host_port(args.route_listen))
    kube_url = await kube.start()
    kubeconfig = Kubeconfig.write(kube_url, getattr(args, "state_dir", None))
    feed.start()
    try:
        running = await start(ServeConfig.from_args(demo_serve_args(args, route_url, kube_url)))
    except BaseException:
        await feed.stop()
        await route.stop()
        await kube.stop()
        kubeconfig.remove()
        raise
    return Demo(running, route, kube, mirror, feed, route_url, kube_url, kubeconfig)


async def run(args: argparse.Namespace) -> None:
    demo = await start_demo(args)
    url = demo.running.url
    print(
        f"zaroz exporter demo\n"
        f"  simulated events route  {demo.route_url}/v1/workloads\n"
        f"  simulated Kubernetes    {demo.kube_url}/apis/units.zaroz.cloud/v1/unitsignals\n"
        f"  overview                {url}/\n"
        f"  metrics                 {url}/metrics\n"
        f"  readiness               {url}/readyz\n"
        f"Explore the cluster with kubectl:\n"
        f"  {demo.kubeconfig.command()}\n"
        "Press Ctrl-C to stop.",
        flush=True,
    )
    try:
        await run_until_stopped(demo.running, args.duration)  # stops the exporter
    finally:
        await demo.feed.stop()
        await demo.route.stop()
        await demo.kube.stop()
        demo.kubeconfig.remove()


def demo_serve_args(args: argparse.Namespace, route_url: str,
                    kube_url: str) -> argparse.Namespace:
    """The demo's exporter is `serve` pointed at the simulated route and API server; the flags
    `serve` has and `demo` has not keep their defaults (ServeConfig.from_args: none)."""
    return argparse.Namespace(**vars(args), events_url=route_url, kube="on",
                              kube_api_url=kube_url)


def _host_port(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(args: argparse.Namespace) -> int:
    try:
        asyncio.run(run(args))
    except ConfigError as e:  # found only once started (a checkpoint it cannot read, a port lost)
        print(e.line("demo"), file=sys.stderr)
        return 2
    return 0
