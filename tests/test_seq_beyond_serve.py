"""Seqs the model cannot hold (2^63 and 2^64 + 1, valid per the contract, which sets no maximum)
in a workload's log on the events route, through the real `serve` process: each is counted once
in zaroz_events_invalid_total{reason="range"} and stepped over, the workload becomes ready, and
a restart (SIGKILL) on the same state dir goes on from the route's cursor, stored exactly."""

from __future__ import annotations

import copy
import time

import aiohttp

from exporter.wiring.state.store import read_state
from tests.serving import Serve
from tests.simlogs import finite_logs, parse, value
from tests.waiting import until
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer

LOGS, _ = finite_logs(seed=21, workloads=1, seconds=20)
(WL, CLEAN), = LOGS.items()
H = len(CLEAN) - 3
BIG = (2**63, 2**64 + 1, 2**64 + 3)  # the last one arrives after the restart


def _at(seq: int, like: dict) -> dict:
    ev = copy.deepcopy(like)
    ev["seq"] = seq
    ev["id"] = f"evt_{seq % 2**128:032x}"
    return ev


async def _samples(s: aiohttp.ClientSession, url: str) -> dict:
    async with s.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=10)) as r:
        assert r.status == 200
        return parse(await r.text())


async def _ready(s: aiohttp.ClientSession, url: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        async with s.get(url + "/readyz") as r:
            if r.status == 200:
                return
            why = await r.text()
        assert time.monotonic() < deadline, f"never ready: {why}"
        await until(lambda: True, 0.1)


def _assert_counts(samples: dict, ranged: int) -> None:
    assert value(samples, "zaroz_events_last_seq", workload=WL) == H
    assert value(samples, "zaroz_events_invalid_total", workload=WL, reason="range") == ranged
    assert value(samples, "zaroz_events_invalid_total", workload=WL, reason="schema") == 0
    for name in ("zaroz_events_gaps_total", "zaroz_events_missing_total"):
        assert value(samples, name, workload=WL) == 0, name
    assert value(samples, "zaroz_exporter_task_restarts_total", task="checkpoint") == 0


async def test_seqs_beyond_64_bits_are_counted_stepped_over_and_the_cursor_restored(tmp_path):
    route = RouteServer(SimConfig(workloads=1).workload_list())
    route.append(WL, [*CLEAN[:H], _at(BIG[0], CLEAN[H]), _at(BIG[1], CLEAN[H + 1])])
    base = await route.start()
    serve = Serve("--events-url", base, "--workload", WL, "--wait", "1", "--state-dir",
                  str(tmp_path), "--checkpoint-interval", "0.2")
    try:
        await serve.start()
        async with aiohttp.ClientSession() as s:
            await _ready(s, serve.url)
            _assert_counts(await _samples(s, serve.url), 2)  # the scrape's commit covers it
            await serve.kill()
            stored = read_state(tmp_path)
            assert stored is not None
            assert stored["workloads"][WL]["log"]["sources"]["route"][-1] == [BIG[1], BIG[1]]
            await serve.start()
            await _ready(s, serve.url)
            _assert_counts(await _samples(s, serve.url), 2)  # not asked for again
            route.append(WL, [_at(BIG[2], CLEAN[H + 2])])  # the route's log goes on
            deadline = time.monotonic() + 20
            while value(got := await _samples(s, serve.url), "zaroz_events_invalid_total",
                        workload=WL, reason="range") < 3:
                assert time.monotonic() < deadline, "the log stopped"
                await until(lambda: True, 0.1)
            _assert_counts(got, 3)
            await _ready(s, serve.url)
    finally:
        await serve.kill()
        await route.stop()
