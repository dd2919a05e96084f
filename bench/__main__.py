"""`python -m bench [NAME...]`: run the benchmarks with their defaults, one at a time.

Each runs in its own interpreter, so the first one's memory and caches cannot colour the second.
"""

from __future__ import annotations

import subprocess
import sys

from bench._common import ROOT, child_env

BENCHMARKS = ("replay", "report", "scrape", "protobuf", "cluster", "webhook", "traces",
              "decoders", "families", "checkpoint")


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"usage: python -m bench [{' | '.join(BENCHMARKS)}]...", file=sys.stderr)
        return 2
    rc = 0
    for name in names:
        cmd = [sys.executable, "-m", f"bench.{name}"]
        rc |= subprocess.run(cmd, cwd=ROOT, env=child_env()).returncode
        print(flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
