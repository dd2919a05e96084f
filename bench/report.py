"""`replay --report` against plain `replay` of the same log, side by side: the report is built
in the same pass as the exposition, so it may cost at most 1.5x the plain replay (target).

Both are the whole CLI in a child process (interpreter start, imports, the pass, the exposition
to /dev/null; the report also written to bench/out), taking turns round by round. Wall time is
the figure; the children's CPU time (user + system) is printed beside it because a shared
2-core machine stretches wall time for reasons that are not ours.

With `--against REV` the same two commands of another revision (a `git archive` of it in
bench/out, run by the same interpreter) take their turns too, so a change is measured against
the tree it started from in the same run.

`--instructions N` counts instead, for a log of N events, the instructions each command
executes (valgrind cachegrind, no cache simulation, PYTHONHASHSEED=0), which the machine's load
does not change; a replay of an empty file is subtracted, leaving the pass itself.

Run: python -m bench.report [--events N] [--repeat K] [--against REV] [--instructions N]
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench._common import OUT, ROOT, child_env, header, interleaved, spread, table
from bench.replay import count_lines, generate
from bench.sync_revisions import checkout

TARGET_RATIO = 1.5
CPU: dict[str, list[float]] = {}


def run_cmd(name: str, cmd: list[str], tree: Path = ROOT) -> float:
    """Wall seconds of the child, which imports the exporter from `tree`; its CPU seconds go
    to CPU[name]."""
    env = child_env() | {"PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, env=env, cwd=tree)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.setdefault(name, []).append(after.ru_utime + after.ru_stime
                                    - before.ru_utime - before.ru_stime)
    return wall


def instructions(cmd: list[str], tree: Path) -> int:
    """Instructions the child executes, counted by valgrind's cachegrind."""
    env = child_env() | {"PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    res = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                          "--cachegrind-out-file=/dev/null", *cmd],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         check=True, env=env, cwd=tree)
    m = re.search(r"I\s+refs:\s+([\d,]+)", res.stderr)
    if m is None:
        raise RuntimeError(f"no instruction count from valgrind: {res.stderr[-500:]}")
    return int(m.group(1).replace(",", ""))


def count_instructions(events: int, workloads: int, seed: int, trees: dict[str, Path]) -> None:
    paths = generate(events, workloads, seed)
    empty = OUT / "empty.jsonl"
    empty.write_bytes(b"")
    base = [sys.executable, "-m", "exporter.cli", "replay"]
    out = OUT / "report-instructions.html"
    cmds = {"replay EMPTY": [*base, str(empty)], "replay FILES": [*base, *map(str, paths)],
            "replay --report FILE FILES": [*base, "--report", str(out), *map(str, paths)]}
    print(f"instructions: {count_lines(paths):,} lines in {len(paths)} files, valgrind "
          "cachegrind (--cache-sim=no), PYTHONHASHSEED=0", flush=True)
    rows = [["tree", "command", "instructions", "the pass (less EMPTY)", "pass / plain pass"]]
    passes: dict[tuple[str, str], int] = {}
    for tag, tree in trees.items():
        counts = {name: instructions(cmd, tree) for name, cmd in cmds.items()}
        for name, n in counts.items():
            p = n - counts["replay EMPTY"]
            passes[tag, name] = p
            rows.append([tag.strip() or "this tree", name, f"{n / 1e6:,.1f} M",
                         f"{p / 1e6:,.1f} M" if p else "",
                         f"{p / passes[tag, 'replay FILES']:.3f}" if p else ""])
    print(table(rows))
    for tag in list(trees)[1:]:
        print(f"this tree / {tag.strip()} (the pass): " + ", ".join(
            f"{name} {passes['', name] / passes[tag, name]:.3f}"
            for name in ("replay FILES", "replay --report FILE FILES")), flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=335_000, help="events in the log (all files)")
    ap.add_argument("--workloads", type=int, default=3, help="workloads (one file each)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds; best is reported")
    ap.add_argument("--against", metavar="REV",
                    help="also run both commands of this git revision, taking turns")
    ap.add_argument("--instructions", type=int, metavar="N",
                    help="count instructions (valgrind) with a log of N events instead of timing")
    args = ap.parse_args(argv)

    header("report")
    if args.instructions:
        if shutil.which("valgrind") is None:
            raise SystemExit("bench.report: --instructions needs valgrind (apt-get install "
                             "valgrind)")
        trees = {"": ROOT} | ({f" @{args.against}": checkout(args.against)} if args.against
                              else {})
        count_instructions(args.instructions, args.workloads, args.seed, trees)
        return
    paths = generate(args.events, args.workloads, args.seed)
    lines = count_lines(paths)
    out = OUT / "report.html"
    base = [sys.executable, "-m", "exporter.cli", "replay"]
    plain_cmd = [*base, *map(str, paths)]
    report_cmd = [*base, "--report", str(out), *map(str, paths)]
    trees = {"": ROOT}
    if args.against:
        trees[f" @{args.against}"] = checkout(args.against)
    cases: dict[str, Callable[[], float]] = {}
    for tag, tree in trees.items():
        for name, cmd in (("replay FILES", plain_cmd), ("replay --report FILE FILES", report_cmd)):
            cases[name + tag] = partial(run_cmd, name + tag, cmd, tree)
    print(f"log: {lines:,} lines in {len(paths)} files; best of {args.repeat}, interleaved",
          flush=True)
    times = interleaved(cases, args.repeat)
    rows = [["command", "best wall time (median, max)", "events/s", "wall / plain",
             "best CPU", "CPU / plain"]]
    for name, ts in times.items():
        plain_name = "replay FILES" + "".join(name.partition(" @")[1:])
        plain, plain_cpu = min(times[plain_name]), min(CPU[plain_name])
        rows.append([name, spread(ts), f"{lines / min(ts):,.0f}", f"{min(ts) / plain:.2f}",
                     f"{min(CPU[name]):.2f} s", f"{min(CPU[name]) / plain_cpu:.2f}"])
    print(table(rows))
    for tag in list(trees)[1:]:
        best = {n: min(ts) for n, ts in times.items()}
        p, r = "replay FILES", "replay --report FILE FILES"
        print(f"this tree / {tag.strip()} (best wall): plain {best[p] / best[p + tag]:.2f}, "
              f"report {best[r] / best[r + tag]:.2f}", flush=True)
    plain = min(times["replay FILES"])
    ratio = min(times["replay --report FILE FILES"]) / plain
    verdict = "OK" if ratio < TARGET_RATIO else "ABOVE TARGET"
    print(f"report / plain = {ratio:.2f} (target < {TARGET_RATIO:g}): {verdict}; "
          f"report {out.stat().st_size / 1024:,.0f} KiB", flush=True)


if __name__ == "__main__":
    main()
