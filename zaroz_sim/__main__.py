"""Demo: serve a live simulated events route, e.g. `python -m zaroz_sim --port 8090`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from zaroz_sim.config import SimConfig
from zaroz_sim.faults import FaultKind, FaultPlan
from zaroz_sim.route import LiveFeed, RouteServer


async def _serve(args: argparse.Namespace) -> None:
    config = SimConfig(seed=args.seed, workloads=args.workloads)
    rates = {kind: args.fault_rate for kind in FaultKind} if args.fault_rate else None
    server = RouteServer(
        config.workload_list(),
        token=args.token,
        retain_last=args.retain_last,
        faults=FaultPlan(rates=rates, seed=args.seed),
    )
    feed = LiveFeed(server, config, time_scale=args.time_scale)
    base = await server.start(args.host, args.port)
    print(f"events route at {base}/v1/workloads", flush=True)
    feed.start()
    try:
        await asyncio.Event().wait()
    finally:
        await feed.stop()
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workloads", type=int, default=3)
    parser.add_argument("--token", default=None)
    parser.add_argument("--retain-last", type=int, default=None)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--fault-rate", type=float, default=0.0, help="per fault kind, 0..1")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
