"""python -m bench.faults --seed 7 --minutes 30 [--exporters 2] [--workloads 6]"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
from pathlib import Path

from bench.faults.run import Options, run
from bench.faults.schedule import Kind


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__)
    p.add_argument("--seed", type=int, default=None, help="none: a fresh one, printed")
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--exporters", type=int, default=2, help="shards at the start")
    p.add_argument("--workloads", type=int, default=6)
    p.add_argument("--fault-rate", type=float, default=0.5, help="faults a second")
    p.add_argument("--kinds", default="", help="comma-separated fault kinds; none: all")
    p.add_argument("--catch-up", type=float, default=120.0, help="seconds, after healing")
    p.add_argument("--root", type=Path, default=None, help="keep the state dirs and logs here")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    kinds = frozenset(Kind(k) for k in args.kinds.split(",") if k) or None
    opts = Options(seed, args.minutes, args.exporters, args.workloads,
                   fault_rate=args.fault_rate, kinds=kinds, catch_up_s=args.catch_up,
                   root=args.root)
    # The route's own traceback when a client hangs up mid-answer (a fault it was told to make).
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    result = asyncio.run(run(opts))
    print(result.describe(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
