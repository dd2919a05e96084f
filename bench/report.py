"""`replay --report` against plain `replay` of the same log, side by side: the report is built
in the same pass as the exposition, so it may cost at most 1.5x the plain replay (target).

Both are the whole CLI in a child process (interpreter start, imports, the pass, the exposition
to /dev/null; the report also written to bench/out), taking turns round by round.

Run: python -m bench.report [--events N] [--repeat K]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from bench._common import OUT, header, interleaved, spread, table
from bench.replay import count_lines, generate, run_cmd

TARGET_RATIO = 1.5


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=335_000, help="events in the log (all files)")
    ap.add_argument("--workloads", type=int, default=3, help="workloads (one file each)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds; best is reported")
    args = ap.parse_args(argv)

    header("report")
    paths = generate(args.events, args.workloads, args.seed)
    lines = count_lines(paths)
    out = OUT / "report.html"
    base = [sys.executable, "-m", "exporter.cli", "replay"]
    cases: dict[str, Callable[[], float]] = {
        "replay FILES": lambda: run_cmd([*base, *map(str, paths)]),
        "replay --report FILE FILES": lambda: run_cmd([*base, "--report", str(out),
                                                      *map(str, paths)]),
    }
    print(f"log: {lines:,} lines in {len(paths)} files; best of {args.repeat}, interleaved",
          flush=True)
    times = interleaved(cases, args.repeat)
    plain = min(times["replay FILES"])
    rows = [["command", "best time (median, max)", "events/s", "time / plain replay"]]
    for name, ts in times.items():
        rows.append([name, spread(ts), f"{lines / min(ts):,.0f}", f"{min(ts) / plain:.2f}"])
    print(table(rows))
    ratio = min(times["replay --report FILE FILES"]) / plain
    verdict = "OK" if ratio < TARGET_RATIO else "ABOVE TARGET"
    print(f"report / plain = {ratio:.2f} (target < {TARGET_RATIO:g}): {verdict}; "
          f"report {out.stat().st_size / 1024:,.0f} KiB", flush=True)


if __name__ == "__main__":
    main()
