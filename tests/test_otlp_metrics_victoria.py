"""The OTLP metrics export into VictoriaMetrics 1.145 (its /opentelemetry/v1/metrics, with
-opentelemetry.usePrometheusNaming): through the real `serve`, a SIGKILL and a restart on the
same state dir, every counter of the final scrape is in VictoriaMetrics under its documented
name, with the scraped value, as one series, and resets() over the run is 0."""

from __future__ import annotations

import subprocess
from pathlib import Path

import aiohttp

from tests.components import VICTORIA_METRICS, require_cached
from tests.promapi import AsyncProm, wait_async
from tests.serving import Feed, Serve, free_port, scrape
from tests.simlogs import finite_logs
from tests.test_otlp_metrics_serve import COUNTERS
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer

STILL = "|".join(sorted(COUNTERS.values()))


async def test_victoria_metrics_holds_every_counter_as_scraped(tmp_path: Path):
    vm_bin = require_cached(VICTORIA_METRICS)
    port = free_port()
    vm = subprocess.Popen(
        [vm_bin, f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={tmp_path / 'vm'}",
         "-opentelemetry.usePrometheusNaming", "-search.latencyOffset=0s",
         "-search.disableCache", "-loggerLevel=ERROR"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    vm_url = f"http://127.0.0.1:{port}"
    logs, _ = finite_logs(seed=23, workloads=2, seconds=150, rate=0.8)
    route = RouteServer(SimConfig(workloads=2).workload_list())
    base = await route.start()
    feed = Feed(route, logs)
    serve = Serve("--events-url", base, "--workload", "wl-1", "--workload", "wl-2",
                  "--wait", "1", "--backoff-max", "0.2", "--state-dir", str(tmp_path / "s"),
                  "--otlp-metrics-endpoint", f"{vm_url}/opentelemetry/v1/metrics",
                  "--otlp-metrics-interval", "0.25")
    try:
        async with aiohttp.ClientSession() as s:
            prom = AsyncProm(s, vm_url)

            async def exported(fed: dict[str, int]) -> bool:
                async with s.get(f"{vm_url}/internal/force_flush"):
                    pass
                got = await prom.result("zaroz_events_last_seq")
                seen = {r["metric"].get("workload"): float(r["value"][1]) for r in got}
                return all(seen.get(w) == n for w, n in fed.items())

            feed.to(0.5)
            await serve.start()
            await wait_async("the first half in VictoriaMetrics",
                             lambda: exported(feed.fed), 60)
            await serve.kill()
            feed.to(1.0)
            await serve.start()
            await wait_async("every event in VictoriaMetrics", lambda: exported(feed.fed), 60)
            final = await scrape(serve.url, s)
            assert final
            stored = await prom.result(f'{{__name__=~"{STILL}"}}')
            by_name: dict[str, list[dict]] = {}
            for r in stored:
                by_name.setdefault(r["metric"]["__name__"], []).append(r)
            checked = 0
            for (name, labels), v in final.items():
                if name not in COUNTERS.values():
                    continue
                match = [r for r in by_name.get(name, [])
                         if all(r["metric"].get(k) == lv for k, lv in labels)]
                assert len(match) == 1, (name, dict(labels), match)
                assert float(match[0]["value"][1]) == v, (name, dict(labels))
                checked += 1
            assert checked >= 10
            assert len(stored) == checked  # no second series of any of them
            resets = await prom.result(f'sum(resets({{__name__=~"{STILL}"}}[1h]))')
            assert resets and float(resets[0]["value"][1]) == 0, resets
    finally:
        await serve.kill()
        await route.stop()
        vm.terminate()
        vm.wait(10)
