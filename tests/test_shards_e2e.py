"""Two shards against the emulated API server and the events route: every workload is exported
by exactly one shard, and all of them by the two together."""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.serve import start
from tests.simlogs import finite_logs
from zaroz_sim.cluster import ClusterMirror
from zaroz_sim.kube.emulator import KubeEmulator
from zaroz_sim.route import RouteServer
from zaroz_sim.scenario import SimConfig

LOGS, _ = finite_logs(seed=21, workloads=6, seconds=120)


async def _workloads(url: str) -> tuple[set[str], set[str], dict]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as r:
        text = await r.text()
    events, signals, shard = set(), set(), {}
    for fam in text_string_to_metric_families(text):
        for sm in fam.samples:
            if sm.name == "zaroz_events_total" and sm.value > 0:
                events.add(sm.labels["workload"])
            elif sm.name == "zaroz_unitsignal_info":
                signals.add(sm.labels["workload"])
            elif sm.name in ("zaroz_exporter_shard", "zaroz_exporter_shards"):
                shard[sm.name] = sm.value
    return events, signals, shard


async def test_two_shards_split_the_workloads_exactly():
    workloads = SimConfig(workloads=6).workload_list()
    route = RouteServer(workloads)
    kube = KubeEmulator(seed=2)
    mirror = ClusterMirror(kube, seed=2)
    for wl, evs in LOGS.items():
        half = evs[: len(evs) // 2]  # units still alive: their UnitSignals exist
        route.append(wl, half)
        mirror.apply(wl, half)
    route_url, kube_url = await route.start(), await kube.start()
    exporters = []
    try:
        for index in (0, 1):
            args = build_parser().parse_args([
                "serve", "--listen", "127.0.0.1:0", "--wait", "1", "--events-url", route_url,
                "--kube", "on", "--kube-api-url", kube_url, "--total-shards", "2",
                "--shard", str(index)])
            exporters.append(await start(ServeConfig.from_args(args)))
        for _ in range(300):
            if all(e.ready() for e in exporters):
                break
            await asyncio.sleep(0.05)
        assert all(e.ready() for e in exporters), [e.readiness() for e in exporters]
        seen = [await _workloads(e.url) for e in exporters]
        all_wl = {w.id for w in workloads}
        ev0, sig0, shard0 = seen[0]
        ev1, sig1, shard1 = seen[1]
        assert ev0 and ev1, "both shards export something"
        assert ev0.isdisjoint(ev1) and ev0 | ev1 == all_wl
        assert sig0.isdisjoint(sig1) and sig0 | sig1 == all_wl
        assert sig0 == ev0 and sig1 == ev1  # a workload's events and UnitSignals stay together
        assert shard0 == {"zaroz_exporter_shard": 0, "zaroz_exporter_shards": 2}
        assert shard1 == {"zaroz_exporter_shard": 1, "zaroz_exporter_shards": 2}
    finally:
        for e in exporters:
            await e.stop()
        await route.stop()
        await kube.stop()


def test_shard_ordinal_comes_from_the_pod_name():
    from exporter.commands.config import shard_of

    args = build_parser().parse_args(["serve", "--total-shards", "3"])
    assert shard_of(args, {"POD_NAME": "zaroz-exporter-2"}).index == 2
    args = build_parser().parse_args(["serve", "--total-shards", "3", "--shard", "1"])
    assert shard_of(args, {"POD_NAME": "zaroz-exporter-2"}).index == 1
