"""The SLO rules on a real Prometheus at both ends of the supported range (2.42, bookworm's, on
PATH; 3.5 LTS from .ci/cache): the native-histogram rules on 2.42 at a threshold that is no classic
bucket boundary (45 s: the readiness buckets have 30 and 60), and the classic rules at 60 s on 3.5,
whose `le` bucket Prometheus 3 stores as `60.0` whatever the exporter wrote (`60`).

The promtool unit tests of the same alerts (alerts/tests/native/) run with promtool 2.53 and 3.5
(tests/test_alerts_native_promtool.py); this runs them on the real servers, through the
exporter's own exposition (protobuf for native histograms): an in-process exporter observes a
fixed mix every tick, Prometheus scrapes it and evaluates the generated rules each second, and
the test reads the recorded error ratios and the ALERTS series. The burn-rate pairs' windows
(5m..3d) hold only the test's seconds of data, which a ratio of rates does not mind.

Per tick (native): `burning` has 3 of 10 readinesses at 50 s (30% slower than 45 s: the fast
burn, 14.4x a 1% budget, fires; classic buckets could only count them against 60 s, where they
are good); `edge` has every one at 40 s (between the 30 s bound and the threshold: good, no
alert); `fine` has one at 50 s in 250 (0.4%: below every pair's burn factor). Classic: the same
at 60 s, with 90 s for the slow ones and 60 s itself (the bound, good) for `edge`.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from alerts import recording, render
from alerts.config import DEFAULT_CONFIG, SLO, Config
from exporter.sinks.metrics.family import Registry
from exporter.web.app import MetricsServer, start_site
from tests.components import PROMETHEUS_3, require, require_cached, start_prometheus, stop_process
from tests.promapi import AsyncProm, get_async, wait_async
from tests.serving import free_port

THRESHOLD = 45.0
CONFIG = Config(slos=(SLO("readiness", 0.99, THRESHOLD), DEFAULT_CONFIG.slo("allocation_ack")),
                native_histograms=True)
READY = "zaroz_unit_ready_seconds"
NS = 1_000_000_000
# workload -> one tick's readiness observations, seconds
MIX: dict[str, Callable[[int], list[float]]] = {
    "burning": lambda tick: [10.0] * 7 + [50.0] * 3,
    "edge": lambda tick: [40.0] * 10,
    "fine": lambda tick: [10.0] * 25 + ([50.0] if tick % 10 == 0 else []),
}
CLASSIC_MIX: dict[str, Callable[[int], list[float]]] = {
    "burning": lambda tick: [10.0] * 7 + [90.0] * 3,
    "edge": lambda tick: [60.0] * 10,
    "fine": lambda tick: [10.0] * 25 + ([90.0] if tick % 10 == 0 else []),
}
# One real server each (the suite's time): native on the oldest, where native histograms are
# newest, and classic on 3.5, where `le` is normalised; promtool 2.53/3.5 and 2.42/3.5 run the
# unit tests of both on both ends (docs/development.md).
NATIVE_ON = ["2.42"]
CLASSIC_ON = ["3.5"]


def _prometheus(version: str) -> str:
    return require_cached(PROMETHEUS_3) if version == "3.5" else require("prometheus")


def test_45s_is_not_a_classic_boundary():
    with pytest.raises(ValueError, match="not a bucket boundary"):
        Config(slos=CONFIG.slos)


async def _observe(registry: Registry, mixes: dict[str, Callable[[int], list[float]]]) -> None:
    fam = registry[READY]
    tick = 0
    while True:
        for wl, mix in mixes.items():
            s = fam.labels(wl)
            for v in mix(tick):
                s.observe_ns(int(v * NS))  # type: ignore[union-attr]
        tick += 1
        await asyncio.sleep(0.5)


@pytest.mark.parametrize("version", NATIVE_ON)
async def test_native_burn_rate_alert_at_a_non_boundary_threshold(version: str) -> None:
    await _burn(_prometheus(version), CONFIG, MIX, native=True)


@pytest.mark.parametrize("version", CLASSIC_ON)
async def test_classic_burn_rate_alert_whatever_le_spelling(version: str) -> None:
    """The classic rules find the 60 s bucket that 3.5 stores as `le="60.0"` from the exporter's
    `le="60"` (2.42 keeps `60`: the promtool tests' spelling)."""
    await _burn(_prometheus(version), DEFAULT_CONFIG, CLASSIC_MIX, native=False)


async def _burn(prometheus: str, config: Config,
                mixes: dict[str, Callable[[int], list[float]]], native: bool) -> None:
    registry = Registry()
    for wl in mixes:
        registry[READY].labels(wl)
    runner, url = await start_site(MetricsServer(registry).app, "127.0.0.1:0")
    feeder = asyncio.create_task(_observe(registry, mixes))
    with tempfile.TemporaryDirectory(prefix="zaroz-native-rules-") as tmp:
        files = []
        for name, text in render.rule_files(config).items():
            (Path(tmp) / name).write_text(text)
            files.append(str(Path(tmp) / name))
        cfg = Path(tmp) / "prometheus.yml"
        cfg.write_text(json.dumps({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": files,
            "scrape_configs": [{"job_name": "zaroz-exporter", "static_configs": [
                {"targets": [url.removeprefix("http://")]}]}],
        }))
        port = free_port()
        proc = start_prometheus(prometheus, cfg, f"{tmp}/data", port,
                                *(["--enable-feature=native-histograms"] if native else []))
        try:
            async with aiohttp.ClientSession() as session:
                p = AsyncProm(session, f"http://127.0.0.1:{port}")
                ratio = recording.slo_error_ratio_name("readiness", "5m")
                await wait_async("error ratios of all three workloads, fine's above 0 (its slow "
                              "ones come every 10th tick)",
                              lambda: _has(p, f'{ratio} > 0 or {ratio}{{workload!="fine"}}', 3),
                              60)
                got = {r["metric"]["workload"]: float(r["value"][1])
                       for r in await p.result(ratio)}
                assert got["burning"] == pytest.approx(0.3, abs=1e-9)
                assert got["edge"] == pytest.approx(0.0, abs=1e-9)
                assert 0 < got["fine"] < 0.01
                await wait_async("the fast burn alert", lambda: _has(
                    p, 'ALERTS{alertname="ZarozReadinessBudgetBurn",long="1h"}', 1), 30)
                alerts = await p.result('ALERTS{alertname="ZarozReadinessBudgetBurn"}')
                assert {a["metric"]["workload"] for a in alerts} == {"burning"}, alerts
                p50 = await p.result(
                    f'{recording.quantile_name(READY, "p50")}{{workload="edge"}}')
                if native:  # the native quantile records answer too: in 40 s's bucket
                    assert 40 / 2 ** (1 / 8) < float(p50[0]["value"][1]) <= 40 * 2 ** (1 / 8)
                else:  # classic: interpolated within (30, 60]
                    assert 30 < float(p50[0]["value"][1]) <= 60
                # Every generated rule evaluates without error.
                groups = (await get_async(session, f"{p.base}/api/v1/rules"))["data"]["groups"]
                bad = [(x["name"], x.get("lastError")) for g in groups for x in g["rules"]
                       if x["health"] != "ok"]
                assert not bad, bad
        finally:
            stop_process(proc)
            feeder.cancel()
            await runner.cleanup()


async def _has(p: AsyncProm, expr: str, n: int) -> bool:
    return len(await p.result(expr)) >= n

