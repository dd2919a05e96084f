"""A pod replaced with an empty state dir (a new process on a new address, so a new `instance`)
replays the retained log from its start. A real Prometheus scraping both must not see that
replay as a burst: `sum(increase(...))` over the window stays within the events that truly
happened in it."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from exporter.wiring.events import Pipeline
from tests.components import require, start_prometheus
from tests.serving import Serve, free_port, scrape
from tests.simlogs import finite_logs, value
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer

WL = "wl-1"
QUERY = "sum(increase(zaroz_unit_ready_seconds_count[10m]))"


def _ready_count(events: list[dict[str, Any]]) -> int:
    p = Pipeline()
    for e in events:
        p.workload(WL).offer(e)
    return p.registry["zaroz_unit_ready_seconds"].labels(WL).count  # type: ignore[union-attr]


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


async def _prom_ready(base: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while True:
            try:
                async with s.get(base + "/-/ready") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            assert time.monotonic() < deadline, "prometheus did not start"
            await asyncio.sleep(0.2)


async def _scraped(base: str, port: int, count: float, timeout: float = 30) -> None:
    """Until Prometheus holds a sample of this instance's ready count at `count` or more.
    Prometheus' discovery hands its first targets over up to 5 s after /-/ready, so a fixed
    sleep after start may still be before the first scrape of a pod."""
    deadline = time.monotonic() + timeout
    expr = f'zaroz_unit_ready_seconds_count{{instance="127.0.0.1:{port}"}}'
    while not any(float(r["value"][1]) >= count for r in _query(base, expr)):
        assert time.monotonic() < deadline, f"prometheus never scraped 127.0.0.1:{port}"
        await asyncio.sleep(0.2)


async def _applied_and_scraped(s: aiohttp.ClientSession, pod: Serve, prom: str,
                               last_seq: int, timeout: float = 60) -> None:
    """Until the pod has applied the log up to `last_seq` and Prometheus holds its ready count
    from then: a fixed pause after feeding can end before either on a busy machine, and the
    window's count would then miss what the pod counted."""
    deadline = time.monotonic() + timeout
    while not (got := await scrape(pod.url, s)) or \
            value(got, "zaroz_events_last_seq", workload=WL) < last_seq:
        assert time.monotonic() < deadline, f"the pod never applied seq {last_seq}"
        await asyncio.sleep(0.1)
    await _scraped(prom, pod.port, value(got, "zaroz_unit_ready_seconds_count", workload=WL),
                   timeout)


async def _until_caught_up(s: aiohttp.ClientSession, pod: Serve,
                           timeout: float = 60) -> dict[Any, float]:
    deadline = time.monotonic() + timeout
    while not (got := await scrape(pod.url, s)) or \
            value(got, "zaroz_route_caught_up", workload=WL) != 1:
        assert time.monotonic() < deadline, "the pod never caught up"
        await asyncio.sleep(0.1)
    return got


async def _feed_slowly(route: RouteServer, events: list[dict[str, Any]], seconds: float) -> None:
    step = max(1, len(events) // 20)
    for i in range(0, len(events), step):
        route.append(WL, events[i:i + step])
        await asyncio.sleep(seconds / 20)


async def test_pod_replacement_with_an_empty_state_dir_is_no_burst(tmp_path: Path):
    prometheus = require("prometheus")
    logs, _ = finite_logs(seed=17, workloads=1, seconds=700, rate=1.0)
    events = logs[WL]
    # The retained log: history (before the window), then live events while A runs, while B
    # replays, and after B caught up.
    history, a_end, b_end = (int(len(events) * f) for f in (0.8, 0.87, 0.93))
    history_ready = _ready_count(events[:history])
    live_ready = _ready_count(events) - history_ready
    seen_ready = (_ready_count(events[:a_end]) - history_ready
                  + _ready_count(events) - _ready_count(events[:b_end]))
    assert history_ready > 3 * live_ready > 0  # a replay counted in the window would show

    route = RouteServer(SimConfig(workloads=1).workload_list())
    base = await route.start()
    route.append(WL, events[:history])
    common = ("--events-url", base, "--workload", WL, "--wait", "1", "--page-limit", "4")
    a = Serve(*common, "--state-dir", str(tmp_path / "a"))
    b = Serve(*common, "--state-dir", str(tmp_path / "b"))  # the new pod: an empty emptyDir
    prom_port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(json.dumps({
        "global": {"scrape_interval": "500ms"},
        "scrape_configs": [{"job_name": "zaroz", "scrape_interval": "500ms",
                            "static_configs": [{"targets": [
                                f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"]}]}],
    }))
    server = start_prometheus(prometheus, cfg, tmp_path / "data", prom_port)
    prom = f"http://127.0.0.1:{prom_port}"
    seen_catching_up = False
    try:
        await _prom_ready(prom)
        await a.start()
        async with aiohttp.ClientSession() as s:
            got = await _until_caught_up(s, a)
            await _scraped(prom, a.port, value(got, "zaroz_unit_ready_seconds_count",
                                               workload=WL))
            await asyncio.sleep(1.5)  # Prometheus has A's caught-up baseline
            await _feed_slowly(route, events[history:a_end], 4.0)
            await _applied_and_scraped(s, a, prom, events[a_end - 1]["seq"])
            await a.kill()  # the pod is gone; its replacement starts with an empty state dir
            await b.start()
            feeding = asyncio.create_task(_feed_slowly(route, events[a_end:b_end], 2.0))
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, "the new pod never caught up"
                got = await scrape(b.url, s)
                if got and value(got, "zaroz_route_caught_up", workload=WL) == 0:
                    seen_catching_up = True  # served (so scraped) while replaying
                if got and value(got, "zaroz_route_caught_up", workload=WL) == 1 \
                        and feeding.done():
                    break
                await asyncio.sleep(0.1)
            await _scraped(prom, b.port, value(got, "zaroz_unit_ready_seconds_count",
                                               workload=WL))
            await asyncio.sleep(1.5)  # Prometheus has B's caught-up baseline
            await _feed_slowly(route, events[b_end:], 4.0)
            await _applied_and_scraped(s, b, prom, events[-1]["seq"])
        result = _query(prom, QUERY)
        total = float(result[0]["value"][1]) if result else 0.0
        per_instance = _query(prom, "increase(zaroz_unit_ready_seconds_count[10m])")
    finally:
        await a.kill()
        await b.kill()
        server.terminate()
        server.wait(timeout=10)
        await route.stop()
    print(f"\nready observations: history {history_ready}, in the window {live_ready} "
          f"({seen_ready} while a pod was caught up); "
          f"{QUERY} = {total:.1f}; per instance: "
          f"{[(r['metric']['instance'], r['value'][1]) for r in per_instance]}")
    assert seen_catching_up
    # Within the true count (Prometheus extrapolates each series by up to half a scrape
    # interval at its edges; what falls between the two pods' samples is not counted).
    assert total <= live_ready * 1.15 + 2, (total, live_ready)
    assert total >= seen_ready * 0.8, (total, seen_ready)
