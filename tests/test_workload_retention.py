"""A workload that leaves the route: once gone from the route's workload list for longer than
--workload-retention, its units, series and stored rows go, the other workloads untouched; one
listed again later starts as new and counts its log once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

from exporter.sinks.metrics.exposition import render_bytes
from exporter.wiring import lifetime
from exporter.wiring.events import Pipeline
from exporter.wiring.state.checkpoint import Checkpointer
from exporter.wiring.state.store import read_state
from tests.serving import Feed, Serve, scrape
from tests.simlogs import NS, assert_matches_truth, finite_logs, parse, value
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer

GONE = "wl-2"


def _of(samples: dict[Any, float], workload: str) -> dict[Any, float]:
    return {k: v for k, v in samples.items() if dict(k[1]).get("workload") == workload}


def _event_log(samples: dict[Any, float], workload: str) -> dict[Any, float]:
    """The workload's counters and histograms computed from its log (not the tailer's)."""
    return {k: v for k, v in _of(samples, workload).items()
            if k[0].startswith(("zaroz_unit_", "zaroz_events_total"))}


async def _scrape_until(url: str, pred: Any, what: str, timeout: float = 60.0,
                        ) -> dict[Any, float]:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while True:
            got = await scrape(url, s)
            if got is not None and pred(got):
                return got
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.1)


async def test_a_workload_gone_from_the_route_is_dropped_after_the_retention(tmp_path: Path):
    logs, truth = finite_logs(seed=31, workloads=3, seconds=240, rate=0.6)
    workloads = SimConfig(workloads=3).workload_list()
    route = RouteServer(workloads)
    base = await route.start()
    feed = Feed(route, logs)
    state = tmp_path / "state"
    serve = Serve("--events-url", base, "--wait", "1", "--discovery-interval", "0.2",
                  "--unit-expiry-interval", "0.2", "--workload-retention", "1.5",
                  "--backoff-max", "0.2", "--state-dir", str(state))
    stayed = [w.id for w in workloads if w.id != GONE]
    try:
        feed.to(0.5)  # units in flight: the gone workload holds units, series and rows
        await serve.start()
        before = await _scrape_until(serve.url, lambda got: all(
            value(got, "zaroz_events_last_seq", workload=w) == n for w, n in feed.fed.items()),
            "the exporter did not catch up")
        assert value(before, "zaroz_workload_units_tracked", workload=GONE) > 0

        route.workloads = [w for w in workloads if w.id != GONE]  # it leaves the route
        left = time.monotonic()
        after = await _scrape_until(serve.url, lambda got: not _of(got, GONE),
                                    f"{GONE}'s series stayed")
        assert time.monotonic() - left >= 1.5  # not before the retention
        # Every series of it went; the others are as they were.
        for w in stayed:
            assert _event_log(after, w) == _event_log(before, w)
            assert value(after, "zaroz_workload_units_tracked", workload=w) == value(
                before, "zaroz_workload_units_tracked", workload=w)
        assert value(after, "zaroz_exporter_workloads_dropped_total", reason="left_route") == 1
        # The scrape saved the checkpoint before it was rendered: its rows are gone.
        stored = read_state(state)
        assert stored is not None and set(stored["workloads"]) == set(stayed)
        assert not [(name, r) for name, rows in stored["metrics"].items() for r in rows
                    if GONE in r]

        route.workloads = workloads  # listed again: new, counted from its log's start
        feed.to(1.0)
        final = await _scrape_until(serve.url, lambda got: all(
            value(got, "zaroz_events_last_seq", workload=w) == len(logs[w]) for w in logs)
            and value(got, "zaroz_route_workloads") == 3, "the exporter did not catch up")
    finally:
        await serve.terminate()
        await route.stop()
    assert assert_matches_truth(final, truth, list(logs)) > 50
    stored = read_state(state)
    assert stored is not None and set(stored["workloads"]) == set(logs)


def test_the_retention_runs_on_across_a_restart(tmp_path: Path):
    # When a workload was first found gone is part of its checkpoint: a restart within the
    # retention neither restarts it nor forgets it, and a workload listed again is kept.
    logs, _ = finite_logs(seed=37, workloads=2, seconds=60, rate=0.5)
    p = Pipeline()
    for w, evs in logs.items():
        for e in evs[: len(evs) // 2]:
            p.workload(w).offer(e)
    cp = Checkpointer(tmp_path, p)
    h = 3600 * NS
    assert lifetime.sweep(p, {"wl-1", "wl-2"}, 24 * h, 100 * h) == []
    assert lifetime.sweep(p, {"wl-1"}, 24 * h, 101 * h) == []  # wl-2 found gone
    cp.save()
    cp.close()
    q = Pipeline()
    cp = Checkpointer(tmp_path, q)
    cp.load()
    assert q.logs["wl-2"].left_at_ns == 101 * h and q.logs["wl-1"].left_at_ns is None
    assert lifetime.sweep(q, {"wl-1"}, 24 * h, 124 * h) == []  # 23 h gone: kept
    assert lifetime.sweep(q, {"wl-1"}, 24 * h, 125 * h) == ["wl-2"]
    assert set(q.logs) == {"wl-1"} and not _of(parse(render_bytes(q.registry).decode()), "wl-2")
    cp.save()
    cp.close()
    stored = read_state(tmp_path)
    assert stored is not None and set(stored["workloads"]) == {"wl-1"}
    assert lifetime.sweep(q, set(), 0, 500 * h) == []  # 0: never dropped


async def test_a_dropped_workload_leaves_no_webhook_gap_check_behind():
    """Events waiting behind a gap set the intake's checks going; once the sweep drops the
    workload they are cancelled, so a log made again under its name starts its own."""
    import contextlib
    from types import SimpleNamespace

    from exporter.commands.serve import Running
    from exporter.sinks.metrics.webhook import WebhookMetrics
    from exporter.sources.intake import Intake

    logs, _ = finite_logs(seed=37, workloads=2, seconds=30, rate=0.5)
    p = Pipeline()
    sup: Any = SimpleNamespace(discovered=True, tailers={"wl-1": None}, fixed=None)
    intake = Intake(p, WebhookMetrics(p.registry), None, grace=60.0)
    intake.supervisor = sup  # a route lists the workloads (no tailer runs: none is asked)
    for w, evs in logs.items():
        p.workload(w)
        intake.deliver(w, evs[2])  # seqs 1 and 2 missing: a gap check is due
    assert {"wl-1", GONE} <= set(intake._timers)
    running = Running("", p, contextlib.AsyncExitStack(), sup, intake=intake)
    h = 3600 * NS
    running.drop_departed(24 * h, 100 * h)  # GONE found gone
    running.drop_departed(24 * h, 125 * h)
    assert GONE not in p.logs
    assert GONE not in intake._timers and GONE not in intake._gap_since
    assert "wl-1" in intake._timers
    intake.close()
