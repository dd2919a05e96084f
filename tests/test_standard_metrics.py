"""`serve` exposes the standard process_* and python_* families (client_python's collectors),
in both formats, and promtool still finds the whole exposition clean."""

from __future__ import annotations

import subprocess
import time

import aiohttp
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.serve import start
from tests.components import require
from tests.simlogs import finite_logs
from tests.waiting import until
from zaroz_sim.route import RouteServer
from zaroz_sim.scenario import SimConfig

LOGS, _ = finite_logs(seed=2, workloads=1, seconds=60)
OM = "application/openmetrics-text; version=1.0.0"


async def _serve_and_scrape() -> tuple[str, str]:
    (wl, events), = LOGS.items()
    route = RouteServer(SimConfig(workloads=1).workload_list())
    route.append(wl, events)
    base = await route.start()
    args = build_parser().parse_args(["serve", "--listen", "127.0.0.1:0", "--wait", "1",
                                      "--events-url", base, "--kube", "off"])
    running = await start(ServeConfig.from_args(args))
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{running.url}/metrics") as r:
                text = await r.text()
            async with s.get(f"{running.url}/metrics", headers={"Accept": OM}) as r:
                assert r.headers["Content-Type"].startswith("application/openmetrics-text")
                om = await r.text()
    finally:
        await running.stop()
        await route.stop()
    return text, om


async def test_process_and_python_families_in_both_formats():
    text, om = await _serve_and_scrape()
    samples = {s.name: s for f in parse_text(text) for s in f.samples}
    assert samples["process_resident_memory_bytes"].value > 1 << 20
    start_s = samples["process_start_time_seconds"].value
    assert time.time() - 3600 < start_s <= time.time()
    for name in ("process_cpu_seconds_total", "process_open_fds", "process_max_fds",
                 "process_virtual_memory_bytes", "python_info",
                 "python_gc_collections_total", "zaroz_route_workloads"):
        assert name in samples, name
    families = {f.name: f for f in parse_om(om)}  # strict: one EOF, at the end
    assert families["process_resident_memory_bytes"].type == "gauge"
    assert families["process_cpu_seconds"].type == "counter"
    assert om.count("# EOF") == 1 and om.endswith("# EOF\n")


async def test_promtool_check_metrics_is_clean_with_the_standard_families():
    promtool = require("promtool")
    text, _ = await _serve_and_scrape()
    assert "process_start_time_seconds" in text
    res = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                         capture_output=True)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), res


async def test_series_and_render_time_per_source():
    """Each scrape reports the previous one's series and render time by source; the series add
    up to zaroz_exporter_series, and `process` counts exactly the collectors' samples."""
    (wl, events), = LOGS.items()
    route = RouteServer(SimConfig(workloads=1).workload_list())
    route.append(wl, events)
    base = await route.start()
    args = build_parser().parse_args(["serve", "--listen", "127.0.0.1:0", "--wait", "1",
                                      "--events-url", base, "--kube", "off"])
    running = await start(ServeConfig.from_args(args))
    try:
        await until(running.ready, timeout=10, interval=0.05)
        async with aiohttp.ClientSession() as s:
            texts = []
            for _ in range(3):
                async with s.get(f"{running.url}/metrics") as r:
                    texts.append(await r.text())
    finally:
        await running.stop()
        await route.stop()
    previous, last = texts[1], texts[2]
    samples = [sm for f in parse_text(last) for sm in f.samples]
    by_source = {sm.labels["source"]: sm.value for sm in samples
                 if sm.name == "zaroz_exporter_source_series"}
    total = next(sm.value for sm in samples if sm.name == "zaroz_exporter_series")
    assert sum(by_source.values()) == total
    prev = [sm for f in parse_text(previous) for sm in f.samples]
    assert by_source["process"] == sum(1 for sm in prev
                                       if sm.name.startswith(("process_", "python_")))
    assert by_source["route"] == sum(1 for sm in prev if sm.name.startswith("zaroz_route_"))
    assert by_source["events"] > 0 and by_source["lifecycle"] > 0
    seconds = {sm.labels["source"]: sm.value for sm in samples
               if sm.name == "zaroz_exporter_source_render_seconds"}
    assert set(seconds) >= {"process", "route", "events", "lifecycle", "exporter"}
    assert all(v >= 0 for v in seconds.values())
