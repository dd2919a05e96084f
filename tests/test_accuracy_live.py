"""End to end: simulated route (with faults) -> tailers -> model -> /metrics == ground truth."""

from __future__ import annotations

import argparse
import asyncio
import gzip

import aiohttp
import pytest

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.serve import start
from tests.simlogs import assert_matches_truth, finite_logs, parse
from zaroz_sim.faults import FaultKind, FaultPlan, drop, http_status, slow, truncate
from zaroz_sim.route import RouteServer
from zaroz_sim.scenario import SimConfig

LOGS, TRUTH = finite_logs(seed=11, workloads=3, seconds=300)


def serve_args(**over: object) -> argparse.Namespace:
    args = build_parser().parse_args(["serve", "--listen", "127.0.0.1:0", "--wait", "1",
                                      "--page-limit", "97", "--backoff-max", "0.2",
                                      "--kube", "off"])
    for k, v in over.items():
        setattr(args, k, v)
    return args


async def _scrape(url: str, **headers: str) -> tuple[str, aiohttp.ClientResponse, bytes]:
    async with aiohttp.ClientSession(auto_decompress=False) as s, s.get(url, headers=headers) as r:
        raw = await r.read()
        body = gzip.decompress(raw) if r.headers.get("Content-Encoding") == "gzip" else raw
        return body.decode(), r, raw


async def _run(faults: FaultPlan) -> tuple[str, RouteServer]:
    workloads = SimConfig(workloads=3).workload_list()
    route = RouteServer(workloads, faults=faults)
    for wl, evs in LOGS.items():
        route.append(wl, evs)
    base = await route.start()
    running = await start(ServeConfig.from_args(serve_args(events_url=base, workload=list(LOGS))))
    try:
        for _ in range(600):
            if running.ready():
                break
            await asyncio.sleep(0.05)
        assert running.ready(), running.readiness()
        text, resp, raw = await _scrape(f"{running.url}/metrics", **{"Accept-Encoding": "gzip"})
        assert resp.headers["Content-Encoding"] == "gzip" and raw[:2] == b"\x1f\x8b"
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return text, route
    finally:
        await running.stop()
        await route.stop()


async def test_clean_route_matches_ground_truth():
    text, route = await _run(FaultPlan())
    assert assert_matches_truth(parse(text), TRUTH, list(LOGS)) > 100
    assert sum(route.requests.values()) >= sum(len(e) for e in LOGS.values()) // 97


async def test_faulty_route_loses_and_duplicates_nothing():
    plan = FaultPlan([
        http_status(503, retry_after=0.1, times=3),
        http_status(500, times=3),
        http_status(429, retry_after=0.1, times=2),
        drop(times=4),
        truncate(times=3),
        slow(2.5, times=1),
    ])
    text, route = await _run(plan)
    samples = parse(text)
    assert assert_matches_truth(samples, TRUTH, list(LOGS)) > 100
    kinds = {k for _, k in route.faults.applied}
    assert {FaultKind.STATUS, FaultKind.DROP, FaultKind.TRUNCATE, FaultKind.SLOW} <= kinds
    failures = sum(v for (name, labels), v in samples.items()
                   if name == "zaroz_route_requests_total" and ("result", "200") not in labels)
    assert failures >= 10


@pytest.fixture
async def demo_like():
    workloads = SimConfig(workloads=1).workload_list()
    route = RouteServer(workloads)
    evs = next(iter(LOGS.values()))
    route.append(workloads[0].id, evs)
    base = await route.start()
    running = await start(ServeConfig.from_args(serve_args(events_url=base)))  # discovery
    yield running, route
    await running.stop()
    await route.stop()


async def test_endpoints_and_negotiation(demo_like):
    running, _ = demo_like
    for _ in range(200):
        if running.ready():
            break
        await asyncio.sleep(0.05)
    text, resp, _ = await _scrape(f"{running.url}/readyz")
    assert resp.status == 200 and text.startswith("ok")
    text, resp, _ = await _scrape(f"{running.url}/healthz")
    assert resp.status == 200
    text, resp, _ = await _scrape(f"{running.url}/")
    assert "/metrics" in text and resp.headers["Content-Type"].startswith("text/html")
    text, resp, _ = await _scrape(
        f"{running.url}/metrics",
        Accept="application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
        **{"Accept-Encoding": "identity"})
    assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
    assert text.endswith("# EOF\n")
    assert "Content-Encoding" not in resp.headers
    assert 'zaroz_route_workloads' in text


async def test_not_ready_until_caught_up():
    route = RouteServer(SimConfig(workloads=1).workload_list())
    base = await route.start()
    await route.stop()  # nothing listens there any more
    running = await start(ServeConfig.from_args(serve_args(events_url=base, workload=["wl-1"])))
    try:
        text, resp, _ = await _scrape(f"{running.url}/readyz")
        assert resp.status == 503 and "not ready" in text
    finally:
        await running.stop()
