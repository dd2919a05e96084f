"""Exact in production: `serve` killed with SIGKILL at random moments and restarted on its state
dir, read by two scrapers at different intervals (a Prometheus HA pair); and a backlog days old
caught up on without expiring units it is about to see again."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from exporter import catalog
from exporter.wiring.expiry import ExpiryClock
from exporter.wiring.state.store import read_state
from tests.serving import Feed, Scraper, Serve, scrape
from tests.simlogs import NS, assert_matches_truth, finite_logs, value
from tests.waiting import until
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer

KINDS = {m.name: m.kind for m in catalog.METRICS}


def _counter_like(sample: str) -> bool:
    base = sample.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
    return KINDS.get(sample) is catalog.Kind.COUNTER or (
        KINDS.get(base) is catalog.Kind.HISTOGRAM and sample != base)


def _resets(scrapes: list[dict[Any, float]]) -> list[tuple[Any, float, float]]:
    """Counter samples that went down between two consecutive scrapes (a reset to Prometheus).
    The checkpoint's own save counters are this process's writes and may restart."""
    out = []
    for a, b in itertools.pairwise(scrapes):
        for k, v in a.items():
            if _counter_like(k[0]) and not k[0].startswith("zaroz_checkpoint_") and k in b \
                    and b[k] < v:
                out.append((k, v, b[k]))
    return out


async def _caught_up(url: str, fed: dict[str, int], timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while True:
            got = await scrape(url, s)
            if got and all(value(got, "zaroz_events_last_seq", workload=w) == n
                           for w, n in fed.items()):
                return got
            assert time.monotonic() < deadline, "the exporter did not catch up"
            await asyncio.sleep(0.1)


async def _kill_between_checkpoint_and_reply(serve: Serve) -> None:
    """A scrape whose reply is never read: the checkpoint is saved before the headers are sent,
    so once they arrive the process dies with a checkpoint newer than any scrape read."""
    async with aiohttp.ClientSession() as s:
        resp = await s.get(serve.url + "/metrics")
        assert resp.status == 200
        await serve.kill()
        resp.close()


async def test_sigkills_with_two_scrapers_end_exactly_at_the_truth(tmp_path: Path):
    logs, truth = finite_logs(seed=11, workloads=2, seconds=300, rate=0.7)
    route = RouteServer(SimConfig(workloads=2).workload_list())
    base = await route.start()
    feed = Feed(route, logs)
    serve = Serve("--events-url", base, "--workload", "wl-1", "--workload", "wl-2",
                  "--wait", "1", "--page-limit", "23", "--backoff-max", "0.2",
                  "--state-dir", str(tmp_path / "state"), "--checkpoint-interval", "0.4")
    fast, slow = Scraper(serve.url, 0.11), Scraper(serve.url, 0.37)
    rng = random.Random(5)
    try:
        feed.to(0.15)
        await serve.start()
        fast.start()
        slow.start()
        steps = [0.3, 0.45, 0.6, 0.75, 0.9]
        kills = {1: "random", 2: "after checkpoint", 4: "random"}
        for i, f in enumerate(steps):
            feed.to(f)
            await asyncio.sleep(rng.uniform(0.2, 1.2))  # part of it applied, part not yet
            how = kills.get(i)
            if how == "after checkpoint":
                await _kill_between_checkpoint_and_reply(serve)
            elif how is not None:
                await serve.kill()
            if how is not None:
                await asyncio.sleep(rng.uniform(0.0, 0.5))
                await serve.start()
        feed.to(1.0)
        final = await _caught_up(serve.url, feed.fed)
        # Both scrapers read the final process: two more scrapes each (the first may have
        # started before it caught up), however slowly a busy machine runs them.
        n_fast, n_slow = len(fast.scrapes), len(slow.scrapes)
        await until(lambda: len(fast.scrapes) >= n_fast + 2 and len(slow.scrapes) >= n_slow + 2,
                    timeout=60.0, interval=0.05)
    finally:
        await fast.stop()
        await slow.stop()
        await serve.kill()
        await route.stop()
    assert assert_matches_truth(final, truth, list(logs)) > 100
    for scraper in (fast, slow):
        last = scraper.scrapes[-1]
        assert value(last, "zaroz_events_last_seq", workload="wl-1") == len(logs["wl-1"])
        assert assert_matches_truth(last, truth, list(logs)) > 100
        # What makes the second replica exact: no counter ever went down, so increase() over
        # any of its windows is the true count, whichever scrapes it missed.
        assert not _resets(scraper.scrapes)
    assert len(slow.scrapes) < len(fast.scrapes)


def test_expiry_clock_is_the_event_clock_until_caught_up_and_idle():
    c = ExpiryClock()
    h = 3600 * NS
    wall = 1_900_000_000 * NS  # days after the log's own time
    clock = 1_000_000 * NS
    # Catching up: the wall clock plays no part, however far ahead.
    assert c.now_ns("w", 10, 0, clock, False, wall) == clock
    assert c.now_ns("w", 10, 0, clock, False, wall + h) == clock
    # Caught up, but it only just stopped moving: still the event clock.
    assert c.now_ns("w", 10, 0, clock, True, wall + 2 * h) == clock
    # Caught up and idle for 5 minutes of wall time: the clock goes on by that much.
    assert c.now_ns("w", 10, 0, clock, True, wall + 2 * h + 300 * NS) == clock + 300 * NS
    # Waiting behind a gap is not idle.
    assert c.now_ns("w", 10, 3, clock, True, wall + 3 * h) == clock
    # An event moves it again.
    assert c.now_ns("w", 11, 0, clock + NS, True, wall + 4 * h) == clock + NS


@pytest.mark.parametrize("idle_timeout", [3600])
async def test_backlog_days_old_loses_nothing_to_expiry(tmp_path: Path, idle_timeout: int):
    ten_days_ago = time.time_ns() - 10 * 24 * 3600 * NS
    logs, truth = finite_logs(seed=13, workloads=2, seconds=300, rate=0.7, start_ns=ten_days_ago)
    route = RouteServer(SimConfig(workloads=2).workload_list())
    base = await route.start()
    feed = Feed(route, logs)
    serve = Serve("--events-url", base, "--workload", "wl-1", "--workload", "wl-2",
                  "--wait", "1", "--unit-idle-timeout", str(idle_timeout),
                  "--unit-expiry-interval", "0.2")
    expired_seen = []
    try:
        await serve.start()
        async with aiohttp.ClientSession() as s:
            for f in (0.2, 0.4, 0.6, 0.8, 1.0):  # bursts, each over several expiry sweeps
                feed.to(f)
                await _caught_up(serve.url, feed.fed)
                for _ in range(4):
                    await asyncio.sleep(0.25)
                    got = await scrape(serve.url, s)
                    assert got is not None
                    expired_seen.append(sum(value(got, "zaroz_workload_units_expired_total",
                                                  workload=w) for w in logs))
            final = await scrape(serve.url, s)
            assert final is not None
            assert_matches_truth(final, truth, list(logs))
            assert value(final, "zaroz_events_invalid_total", workload="wl-1", reason="schema") \
                == 0
            # A unit created at the end of the log, then the log's own clock passes the idle
            # timeout: now that unit (idle for longer than the timeout) does expire.
            last = logs["wl-1"][-1]
            template = next(e for e in logs["wl-1"] if e["type"] == "unit.created")
            created = {**_shifted(last, 0), "type": "unit.created", "data": {},
                       "unit": {**template["unit"], "id": "u_0123456789abcdef01234567"}}
            later = _shifted(created, seconds=idle_timeout + 60)
            route.append("wl-1", [created, later])
            feed.fed["wl-1"] += 2
            await _caught_up(serve.url, feed.fed)
            deadline = time.monotonic() + 10
            while True:
                got = await scrape(serve.url, s)
                assert got is not None
                if value(got, "zaroz_workload_units_expired_total", workload="wl-1") > 0:
                    break
                assert time.monotonic() < deadline, "units never expired by the event clock"
                await asyncio.sleep(0.2)
    finally:
        await serve.kill()
        await route.stop()
    assert expired_seen and set(expired_seen) == {0}
    assert value(got, "zaroz_workload_units_expired_total", workload="wl-1") == 1
    assert value(got, "zaroz_events_invalid_total", workload="wl-1", reason="schema") == 0
    assert value(got, "zaroz_workload_units_expired_total", workload="wl-2") == 0


def _shifted(event: dict[str, Any], seconds: int) -> dict[str, Any]:
    """A units.scaled event `seconds` after `event`, next in its log."""
    from exporter.timestamps import parse_rfc3339_ns
    from zaroz_sim.timefmt import TimeForm, render

    at = parse_rfc3339_ns(event["occurred_at"]) // NS * NS + seconds * NS
    eid = f"evt_{(int(event['id'][4:], 16) + 1) % 16**32:032x}"
    return {**event, "seq": event["seq"] + 1, "id": eid, "type": "units.scaled",
            "occurred_at": render(at, TimeForm(digits=0)), "unit": None,
            "data": {"from": 1, "to": 1, "reason": "test"}}


async def test_sigterm_saves_everything_applied_without_a_scrape(tmp_path: Path):
    logs, truth = finite_logs(seed=3, workloads=1, seconds=120, rate=0.7)
    route = RouteServer(SimConfig(workloads=1).workload_list())
    base = await route.start()
    route.append("wl-1", logs["wl-1"])
    state = tmp_path / "state"
    serve = Serve("--events-url", base, "--workload", "wl-1", "--wait", "1",
                  "--state-dir", str(state), "--checkpoint-interval", "0")
    try:
        await serve.start()
        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as s:  # readiness only: no scrape, no checkpoint
            while True:
                async with s.get(serve.url + "/readyz") as r:
                    if r.status == 200:
                        break
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
        assert read_state(state) is None
        await serve.terminate()
        saved = read_state(state)
        assert saved is not None
        assert saved["workloads"]["wl-1"]["cursor"] == len(logs["wl-1"])
        # The next process starts from it: the whole truth at once, nothing fetched again.
        await serve.start()
        async with aiohttp.ClientSession() as s:
            got = await scrape(serve.url, s)
        assert got is not None
        assert_matches_truth(got, truth, ["wl-1"])
    finally:
        await serve.kill()
        await route.stop()
