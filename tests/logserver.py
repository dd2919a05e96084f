"""`serve` tailing a finite simulator log (from `tests.simlogs.finite_logs`) on a simulated route,
for a while: a scrape target whose ground truth the test computes from the same seed.

Run: python -m tests.logserver SEED WORKLOADS SECONDS RATE DURATION [serve flags...]
"""

from __future__ import annotations

import asyncio
import sys

from exporter.cli import build_parser
from exporter.commands import logs
from exporter.commands.config import ServeConfig
from exporter.commands.serve import run_until_stopped, start
from tests.simlogs import finite_logs
from zaroz_sim.route import RouteServer
from zaroz_sim.scenario import SimConfig


async def main(seed: int, workloads: int, seconds: int, rate: float, duration: float,
               flags: list[str]) -> None:
    log, _ = finite_logs(seed=seed, workloads=workloads, seconds=seconds, rate=rate)
    route = RouteServer(SimConfig(workloads=workloads).workload_list())
    for wl, evs in log.items():
        route.append(wl, evs)
    args = build_parser().parse_args(["serve", "--events-url", await route.start(), "--kube",
                                      "off", *[f"--workload={w}" for w in log], *flags])
    logs.setup(args.log_level, args.log_format)
    try:
        await run_until_stopped(await start(ServeConfig.from_args(args)), duration)
    finally:
        await route.stop()


if __name__ == "__main__":
    s, w, sec, r, d, *rest = sys.argv[1:]
    asyncio.run(main(int(s), int(w), int(sec), float(r), float(d), rest))
