"""`serve` wiring of webhooks and checkpoints: signed deliveries through the real server, a
missed delivery backfilled from the route, and a restart that resumes from the state dir."""

from __future__ import annotations

import random

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.serve import start
from tests.simlogs import assert_matches_truth, finite_logs
from tests.waiting import until
from zaroz_sim.route import RouteServer
from zaroz_sim.scenario import SimConfig
from zaroz_sim.webhook import WebhookSender, delivery_plan

LOGS, TRUTH = finite_logs(seed=8, workloads=1, seconds=200)
(WL, EVENTS), = LOGS.items()


async def _scrape(url: str) -> dict:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as r:
        assert r.status == 200
        text = await r.text()
    return {(sm.name, frozenset(sm.labels.items())): sm.value
            for fam in text_string_to_metric_families(text) for sm in fam.samples}


def _args(*extra: str) -> object:
    return build_parser().parse_args(["serve", "--listen", "127.0.0.1:0", "--wait", "1",
                                      "--kube", "off", "--webhook-gap-grace", "0.2", *extra])


async def _until(cond, timeout: float = 15.0) -> None:
    await until(cond, timeout, interval=0.05)


async def test_webhooks_with_route_backfill_match_ground_truth(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    route = RouteServer(SimConfig(workloads=1).workload_list())
    route.append(WL, EVENTS)  # the route has everything; webhooks miss some deliveries
    base = await route.start()
    running = await start(ServeConfig.from_args(_args("--events-url", base, "--workload", WL,
                                "--webhook-secret-file", str(secret), "--wait", "30")))
    try:
        rng = random.Random(3)
        drop = frozenset(e["seq"] for e in EVENTS if rng.random() < 0.05)
        plan = delivery_plan(EVENTS, rng=rng, duplicates=0.2, window=8, drop=drop,
                             ping_every=50)
        async with aiohttp.ClientSession() as s:
            statuses = await WebhookSender(s, running.url, "s3cret").send_all(
                WL, plan, concurrency=4)
        assert set(statuses) == {200}
        log = running.pipeline.logs[WL]
        await _until(lambda: log.applied_through == len(EVENTS))
        samples = await _scrape(running.url)
        assert_matches_truth(samples, TRUTH, [WL], allow_duplicates=True)
        # The platform redelivered exactly K events (the plan's repeats): only those are
        # duplicates. The route's re-reads of what the webhook gave (backfills) are the
        # exporter's own overlap and show only as refetched.
        delivered = [d["seq"] for d in plan if d["type"] != "webhook.ping"]
        k = len(delivered) - len(set(delivered))
        assert k > 10

        def sample(name: str, source: str) -> float:
            return samples.get((name, frozenset({("workload", WL), ("source", source)})), 0)

        assert sample("zaroz_events_duplicate_total", "webhook") == k
        assert sample("zaroz_events_duplicate_total", "route") == 0
        assert sample("zaroz_events_refetched_total", "route") > 0
        assert samples[("zaroz_webhook_deliveries_total", frozenset({("result", "duplicate")}))] \
            == k
        pings = sum(1 for d in plan if d["type"] == "webhook.ping")
        assert samples[("zaroz_webhook_pings_total", frozenset({("workload", WL)}))] == pings
        assert ("zaroz_events_total", frozenset({("workload", WL), ("type", "webhook.ping")})) \
            not in samples
        accepted = samples[("zaroz_webhook_deliveries_total", frozenset({("result", "accepted")}))]
        assert accepted > 0
    finally:
        await running.stop()
        await route.stop()


async def test_restart_resumes_from_the_checkpoint_without_counting_twice(tmp_path):
    route = RouteServer(SimConfig(workloads=1).workload_list())
    half = len(EVENTS) // 2
    route.append(WL, EVENTS[:half])
    base = await route.start()
    state = tmp_path / "state"
    try:
        first = await start(ServeConfig.from_args(_args("--events-url", base, "--workload", WL,
                                  "--state-dir", str(state))))
        await _until(lambda: first.ready())
        s1 = await _scrape(first.url)  # the checkpoint now equals this scrape
        await first.stop()
        route.append(WL, EVENTS[half:])
        second = await start(ServeConfig.from_args(_args("--events-url", base, "--workload", WL,
                                   "--state-dir", str(state))))
        await _until(lambda: second.ready())
        s2 = await _scrape(second.url)
        await second.stop()
    finally:
        await route.stop()
    # Counters continue from the checkpoint: the second process alone shows the truth, and no
    # counter it shows is below what the first one exposed (a scraper sees no reset).
    assert_matches_truth(s2, TRUTH, [WL])
    assert s1[("zaroz_events_total", frozenset({("workload", WL), ("type", "unit.created")}))] > 0
    assert all(s2.get(k, 0) >= v for k, v in s1.items()
               if k[0].endswith(("_total", "_count", "_bucket"))
               and not k[0].startswith("zaroz_checkpoint_"))
