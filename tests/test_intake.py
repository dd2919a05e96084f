"""The ordered intake: webhook deliveries (duplicated, reordered) and the route tailer feed one
WorkloadLog; gaps and pings ahead make the tailer backfill from the route."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.metrics.route import RouteMetrics
from exporter.sinks.metrics.webhook import WebhookMetrics
from exporter.sources.backoff import Backoff
from exporter.sources.intake import Intake
from exporter.sources.route import RouteClient
from exporter.sources.tailer import TailSupervisor
from exporter.sources.webhook import SecretFiles, WebhookReceiver
from exporter.web.app import start_site
from exporter.wiring.events import Pipeline
from tests.envelopes import Log
from tests.simlogs import assert_matches_truth, finite_logs, parse
from tests.waiting import until
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer
from zaroz_sim.webhook import WebhookSender, delivery_plan, ping

SECRET = b"s3cret-for-tests"
LOGS, TRUTH = finite_logs(seed=5, workloads=2, seconds=150, rate=0.5)


def long_polling(route: RouteServer, workload: str) -> bool:
    """A request is held in the route's long poll of `workload` (waiting on its log's change
    event): a condition to wait on, where a fixed pause may end before the request is made."""
    return bool(route.logs[workload].changed._waiters)


def silent_append(route: RouteServer, workload: str, events: list[dict[str, Any]]) -> None:
    """Add events to the route's log without waking long polls: the tailer does not see them
    until something makes it ask."""
    log = route.logs[workload]
    for e in events:
        log.head = e["seq"]
        if e["seq"] not in log.lost:
            log.seqs.append(e["seq"])
            log.events.append(e)


class Exporter:
    """Pipeline + optional tailers + webhook receiver on loopback."""

    def __init__(self, tmp: Path, route_url: str | None, workloads: list[str] | None,
                 grace: float = 0.1, give_up_after: float = 60.0) -> None:
        (tmp / "secret").write_bytes(SECRET)
        self.pipeline = Pipeline()
        self.metrics = WebhookMetrics(self.pipeline.registry)
        self.session = aiohttp.ClientSession()
        self.supervisor = None
        if route_url is not None:
            self.supervisor = TailSupervisor(
                RouteClient(self.session, route_url), self.pipeline,
                RouteMetrics(self.pipeline.registry), workloads, 60.0,
                backoff_factory=lambda: Backoff(0.01, 0.05, rng=random.Random(0)),
                wait=30, limit=100, idle_delay=0.01)
        self.intake = Intake(self.pipeline, self.metrics, self.supervisor, grace=grace,
                             give_up_after=give_up_after, min_backfill_interval=0.0)
        self.app = web.Application()
        WebhookReceiver(self.intake, SecretFiles([tmp / "secret"]), self.metrics).install(
            self.app)

    async def start(self) -> str:
        self.runner, self.url = await start_site(self.app, "127.0.0.1:0")
        if self.supervisor is not None:
            await self.supervisor.start()
        return self.url

    async def stop(self) -> None:
        self.intake.close()
        if self.supervisor is not None:
            await self.supervisor.stop()
        await self.runner.cleanup()
        await self.session.close()

    def value(self, name: str, *labels: str) -> float:
        s = self.pipeline.registry[name].series.get(labels)
        return s.value if s is not None else 0

    def applied(self, w: str) -> int:
        wl = self.pipeline.logs.get(w)
        return wl.applied_through if wl else 0


async def test_duplicated_reordered_deliveries_apply_each_event_once(tmp_path: Path):
    ex = Exporter(tmp_path, None, None)
    url = await ex.start()
    rng = random.Random(3)
    dups = {}
    try:
        async with aiohttp.ClientSession() as s:
            sender = WebhookSender(s, url, SECRET)
            for w, events in LOGS.items():
                plan = delivery_plan(events, rng=rng, duplicates=0.2, window=8, ping_every=50)
                dups[w] = len([d for d in plan if d["type"] != "webhook.ping"]) - len(events)
                assert dups[w] > 10
                final = await sender.send_all(w, plan, concurrency=6)
                assert set(final) == {200}
        samples = parse(render_bytes(ex.pipeline.registry).decode())
        for w in LOGS:
            key = ("zaroz_events_duplicate_total",
                   frozenset({"workload": w, "source": "webhook"}.items()))
            # With several deliveries in flight a copy can overtake its original: duplicates are
            # counted whichever arrives second, so the count is exact either way.
            assert samples[key] == dups[w]
            samples[key] = 0
            assert not ex.pipeline.logs[w].pending
        assert assert_matches_truth(samples, TRUTH, list(LOGS)) > 50
        assert ex.value("zaroz_webhook_deliveries_total", "duplicate") == sum(dups.values())
        assert ex.value("zaroz_webhook_deliveries_total", "ping") > 0
    finally:
        await ex.stop()


@pytest.fixture
async def route_and_exporter(tmp_path: Path):
    route = RouteServer(SimConfig(workloads=1).workload_list())
    route_url = await route.start()
    log = Log()
    for i in range(30):
        log.add("unit.created", unit=f"u{i}", at_ms=i)
    route.append("wl-1", log.events[:10])
    ex = Exporter(tmp_path, route_url, ["wl-1"], grace=0.2)
    url = await ex.start()
    await until(lambda: ex.supervisor.tailers["wl-1"].caught_up and ex.applied("wl-1") == 10)
    await until(lambda: long_polling(route, "wl-1"))  # the tailer is in a 30 s long poll
    session = aiohttp.ClientSession()
    yield route, ex, WebhookSender(session, url, SECRET), log.events
    await session.close()
    await ex.stop()
    await route.stop()


async def test_ping_ahead_backfills_from_route(route_and_exporter):
    route, ex, sender, events = route_and_exporter
    silent_append(route, "wl-1", events[10:20])
    await asyncio.sleep(0.3)
    assert ex.applied("wl-1") == 10  # the long poll did not see them
    assert await sender.send("wl-1", ping(20)) == 200
    await until(lambda: ex.applied("wl-1") == 20, timeout=2.0)
    assert ex.value("zaroz_webhook_backfills_total", "wl-1", "ping") == 1
    assert ex.value("zaroz_webhook_cursor", "wl-1") == 20
    assert ex.value("zaroz_events_gaps_total", "wl-1") == 0
    # A ping that is not ahead asks for nothing.
    assert await sender.send("wl-1", ping(20)) == 200
    assert ex.value("zaroz_webhook_backfills_total", "wl-1", "ping") == 1


async def test_webhook_gap_filled_from_route_after_grace(route_and_exporter):
    route, ex, sender, events = route_and_exporter
    silent_append(route, "wl-1", events[10:20])
    for e in events[11:20]:  # seq 11 never delivered
        assert await sender.send("wl-1", e) == 200
    t0 = time.monotonic()
    assert len(ex.pipeline.logs["wl-1"].pending) == 9
    await until(lambda: ex.applied("wl-1") == 20, timeout=2.0)
    assert time.monotonic() - t0 >= 0.1  # not before the grace
    assert ex.value("zaroz_webhook_backfills_total", "wl-1", "gap") == 1
    assert ex.value("zaroz_events_gaps_total", "wl-1") == 0
    assert ex.value("zaroz_events_total", "wl-1", "unit.created") == 20


async def test_gap_missing_from_route_too_is_given_up(route_and_exporter):
    route, ex, sender, events = route_and_exporter
    route.logs["wl-1"].lost.add(11)
    silent_append(route, "wl-1", events[10:20])
    for e in events[11:20]:
        await sender.send("wl-1", e)
    await until(lambda: ex.applied("wl-1") == 20, timeout=2.0)
    assert ex.value("zaroz_events_gaps_total", "wl-1") == 1
    assert ex.value("zaroz_events_missing_total", "wl-1") == 1
    assert ex.value("zaroz_events_total", "wl-1", "unit.created") == 19


async def test_webhooks_only_gap_given_up_after_timeout(tmp_path: Path):
    ex = Exporter(tmp_path, None, None, grace=0.05, give_up_after=0.2)
    url = await ex.start()
    log = Log()
    for i in range(5):
        log.add("unit.created", unit=f"u{i}", at_ms=i)
    try:
        async with aiohttp.ClientSession() as s:
            sender = WebhookSender(s, url, SECRET)
            for e in [log.events[0], *log.events[2:]]:
                assert await sender.send("wl-x", e) == 200
            assert ex.applied("wl-x") == 1
            await until(lambda: ex.applied("wl-x") == 5, timeout=2.0)
        assert ex.value("zaroz_events_missing_total", "wl-x") == 1
    finally:
        await ex.stop()


async def test_unknown_workload_starts_tailer_in_discovery_mode(tmp_path: Path):
    wls = SimConfig(workloads=2).workload_list()
    route = RouteServer(wls)
    route_url = await route.start()
    log = Log()
    log.add("unit.created", unit="u0")
    log.add("unit.created", unit="u1")
    route.append("wl-2", log.events)
    ex = Exporter(tmp_path, route_url, None)  # discovery, not run yet (60 s interval, not started)
    ex.supervisor.discovered = True
    url = await ex.start()
    try:
        async with aiohttp.ClientSession() as s:
            assert await WebhookSender(s, url, SECRET).send("wl-2", log.events[1]) == 200
        assert "wl-2" in ex.supervisor.tailers
        await until(lambda: ex.applied("wl-2") == 2)
    finally:
        await ex.stop()
        await route.stop()


async def test_fixed_workloads_ignore_others(route_and_exporter):
    _, ex, sender, events = route_and_exporter
    assert await sender.send("wl-other", events[0]) == 200
    assert "wl-other" not in ex.pipeline.logs
    assert ex.value("zaroz_webhook_deliveries_total", "ignored") == 1


async def test_other_shards_workload_is_ignored(tmp_path: Path):
    route = RouteServer(SimConfig(workloads=1).workload_list())
    route_url = await route.start()
    ex = Exporter(tmp_path, route_url, None)
    ex.supervisor.owns = lambda w: w != "wl-9"
    url = await ex.start()
    log = Log()
    log.add("unit.created", unit="u0")
    try:
        async with aiohttp.ClientSession() as s:
            assert await WebhookSender(s, url, SECRET).send("wl-9", log.events[0]) == 200
        assert "wl-9" not in ex.pipeline.logs and "wl-9" not in ex.supervisor.tailers
        assert ex.value("zaroz_webhook_deliveries_total", "ignored") == 1
    finally:
        await ex.stop()
        await route.stop()


async def test_ping_inside_backfill_interval_is_coalesced_not_dropped(route_and_exporter):
    route, ex, sender, events = route_and_exporter
    ex.intake.min_backfill_interval = 0.5
    silent_append(route, "wl-1", events[10:15])
    assert await sender.send("wl-1", ping(15)) == 200
    await until(lambda: ex.applied("wl-1") == 15, timeout=2.0)
    # The tailer is back in its long poll; a second ping inside the interval must not be lost.
    await until(lambda: long_polling(route, "wl-1"))
    silent_append(route, "wl-1", events[15:20])
    assert await sender.send("wl-1", ping(20)) == 200
    assert await sender.send("wl-1", ping(20)) == 200  # coalesced with the one waiting
    await until(lambda: ex.applied("wl-1") == 20, timeout=2.0)
    assert ex.value("zaroz_webhook_backfills_total", "wl-1", "ping") == 2
    assert ex.value("zaroz_webhook_pings_total", "wl-1") == 3
    assert ("wl-1", "webhook.ping") not in ex.pipeline.registry["zaroz_events_total"].series


async def test_delivery_replayed_under_another_workload_is_refused(tmp_path: Path):
    ex = Exporter(tmp_path, None, None)
    url = await ex.start()
    log = Log()
    for i in range(3):
        log.add("unit.created", unit=f"u{i}", at_ms=i)
    try:
        async with aiohttp.ClientSession() as s:
            sender = WebhookSender(s, url, SECRET)
            for e in log.events:
                assert await sender.send("wl-a", e) == 200
            assert await sender.send("wl-a", log.events[0]) == 200  # a redelivery: fine
            status = await sender.send("wl-b", log.events[1])  # the same event, another name
            assert status == 409
        assert ex.applied("wl-a") == 3
        assert "wl-b" not in ex.pipeline.logs
        assert ex.value("zaroz_webhook_deliveries_total", "cross_workload") == 1
        assert ex.value("zaroz_events_duplicate_total", "wl-a", "webhook") == 1
    finally:
        await ex.stop()
