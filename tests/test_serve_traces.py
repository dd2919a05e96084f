"""`serve` with --otlp-endpoint: every unit's lifecycle reaches a real OTLP receiver, and the
OpenMetrics scrape links the headline histograms to those traces."""

from __future__ import annotations

import asyncio

import aiohttp

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.serve import start
from exporter.model.traceids import trace_hex
from tests.otlp_receiver import OtlpReceiver
from tests.simlogs import finite_logs
from zaroz_sim.route import RouteServer
from zaroz_sim.scenario import SimConfig

LOGS, TRUTH = finite_logs(seed=4, workloads=1, seconds=120)


async def test_serve_exports_traces_and_exemplars():
    (wl, events), = LOGS.items()
    route = RouteServer(SimConfig(workloads=1).workload_list())
    route.append(wl, events)
    base = await route.start()
    with OtlpReceiver() as rx:
        args = build_parser().parse_args([
            "serve", "--listen", "127.0.0.1:0", "--wait", "1", "--events-url", base,
            "--kube", "off", "--otlp-endpoint", rx.endpoint, "--workload", wl])
        running = await start(ServeConfig.from_args(args))
        try:
            for _ in range(300):
                if running.ready():
                    break
                await asyncio.sleep(0.05)
            headers = {"Accept": "application/openmetrics-text; version=1.0.0"}
            async with aiohttp.ClientSession() as s, \
                    s.get(f"{running.url}/metrics", headers=headers) as r:
                om = await r.text()
        finally:
            await running.stop()  # flushes the span queue
        await route.stop()
        units = {e["unit"]["id"] for e in events if e["type"] == "unit.created"}
        roots = [sp for sp in rx.spans if not sp.parent_span_id]
        assert {sp.trace_id for sp in roots} == {trace_hex(wl, u) for u in units}
        assert len(roots) == len(units)  # one root per unit: every unit was destroyed
        ready_exemplars = [line for line in om.splitlines()
                           if line.startswith("zaroz_unit_ready_seconds_bucket") and " # {" in line]
        assert ready_exemplars
        linked = {line.split('trace_id="')[1][:32] for line in ready_exemplars}
        assert linked <= {sp.trace_id for sp in roots}
