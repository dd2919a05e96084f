"""`serve` keeps native buckets from its first observation, whatever the scrapers ask for: a
protobuf scrape that comes after a stream of text scrapes finds native buckets holding exactly
what the classic ones hold (docs/metrics.md, "Restarts and scrapers")."""

from __future__ import annotations

import aiohttp

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.serve import start
from tests import pbdecode
from tests.simlogs import finite_logs
from tests.test_protobuf import ACCEPT_PROTO, ACCEPT_TEXT
from tests.waiting import until
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer

HISTOGRAMS = ("zaroz_unit_ready_seconds", "zaroz_unit_allocation_ack_seconds",
              "zaroz_unit_drain_seconds")
LOGS, _ = finite_logs(seed=11, workloads=2, seconds=300)


async def test_first_protobuf_scrape_after_text_scrapes_has_every_observation_natively():
    route = RouteServer(SimConfig(workloads=2).workload_list())
    url = await route.start()
    args = build_parser().parse_args(["serve", "--events-url", url, "--listen", "127.0.0.1:0",
                                      "--kube", "off", "--wait", "1"])
    running = await start(ServeConfig.from_args(args))
    try:
        async with aiohttp.ClientSession() as s:
            for wl, events in LOGS.items():  # in three parts, a text scrape after each
                third = len(events) // 3
                for part in (events[:third], events[third:2 * third], events[2 * third:]):
                    route.append(wl, part)
                    await until(lambda wl=wl: wl in running.pipeline.logs and running.pipeline
                                .logs[wl].applied_through == route.head_seq(wl),
                                timeout=20, interval=0.02)
                    for accept in (ACCEPT_TEXT, "text/plain"):
                        async with s.get(running.url + "/metrics",
                                         headers={"Accept": accept}) as r:
                            assert r.status == 200
                            assert b"zaroz_unit_ready_seconds" in await r.read()
            async with s.get(running.url + "/metrics", headers={"Accept": ACCEPT_PROTO}) as r:
                body = await r.read()
    finally:
        await running.stop()
        await route.stop()
    fams = {mf.name: mf for mf in pbdecode.families(body)}
    seen = 0
    for name in HISTOGRAMS:
        for m in fams[name].metric:
            h = m.histogram
            classic = h.sample_count
            native = sum(pbdecode.native_buckets(h).values()) + h.zero_count
            assert h.schema == 3 and native == classic, (name, native, classic)
            seen += classic
    assert seen > 100
