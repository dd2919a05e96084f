"""The exporter's share of a 100k initial sync at two (or more) git revisions, side by side.

For a bisect: the same LIST pages (bench.cluster's objects, built once in its emulator and
cached in bench/out) applied by each revision's own `bench.cluster.local_sync` (decode + apply
page by page, the collector paused, as its reflector does), each revision in a fresh child
process, the revisions taking turns round after round. Wall and CPU time per round: on a shared
machine the CPU time is the steadier figure. Also probes the machine: what first touching fresh
memory costs (a sync grows the process by ~0.5 GiB) and `orjson.loads` of the pages alone.

Run: python -m bench.sync_revisions REV [REV ...] [--objects N] [--rounds K] [--untyped]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

from bench._common import OUT, checkout, child_env, header, table

CHILD = r"""
import inspect, json, sys, time
tree, pages_file, typed = sys.argv[1], sys.argv[2], sys.argv[3] == "typed"
sys.path.insert(0, tree)
from bench import cluster as bc
pages = open(pages_file, "rb").read().split(b"\n")
kw = {"typed": typed} if "typed" in inspect.signature(bc.local_sync).parameters else {}
out = []
for _ in range(2):  # the second in the same process: warm imports and caches
    c = time.process_time()
    d, a, reg, model = bc.local_sync(pages, **kw)
    out.append((d + a, time.process_time() - c, "typed" if kw.get("typed") else "untyped"))
    del reg, model
    bc.release_frozen()
print(json.dumps(out))
"""


def pages_file(objects: int) -> Path:
    path = OUT / f"sync-pages-{objects}.bin"
    if not path.exists():
        from bench.cluster import Emulator, Shape, fetch_pages

        emu = Emulator.start(Shape(objects, 20, 50, 64, 1))
        try:
            pages = asyncio.run(fetch_pages(emu.url))
        finally:
            emu.stop()
        OUT.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\n".join(pages))
        print(f"{objects:,} objects built in {emu.build_s:.1f} s: {len(pages)} pages", flush=True)
    return path


def probe(pages: Path) -> str:
    """First touch of 1 GiB of anonymous memory, and orjson.loads of every page, all kept."""
    import gc

    import orjson

    n = 1 << 30
    mm = mmap.mmap(-1, n)
    t = time.perf_counter()
    for off in range(0, n, 4096):
        mm[off] = 1
    touch = time.perf_counter() - t
    mm.close()
    bodies = pages.read_bytes().split(b"\n")
    gc.disable()
    try:
        c = time.process_time()
        kept = [orjson.loads(b) for b in bodies]
        decode = time.process_time() - c
        del kept
    finally:
        gc.enable()
    return (f"machine: first touch of fresh memory {touch / (n / 4096) * 1e6:.2f} µs a 4 KiB "
            f"page (1 GiB in {touch:.2f} s); orjson {orjson.__version__} loads of the "
            f"{len(bodies)} pages, all kept, {decode * 1e3:,.0f} ms CPU; load average "
            f"{os.getloadavg()[0]:.1f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("revs", nargs="+", help="git revisions (HEAD, a hash, a branch)")
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3, help="turns of every revision")
    ap.add_argument("--untyped", action="store_true",
                    help="orjson into dicts also where the revision can decode typed")
    args = ap.parse_args(argv)
    header("sync_revisions")
    pages = pages_file(args.objects)
    print(probe(pages), flush=True)
    trees = {rev: checkout(rev) for rev in args.revs}
    wall: dict[str, list[float]] = {rev: [] for rev in trees}
    cpu: dict[str, list[float]] = {rev: [] for rev in trees}
    kind: dict[str, str] = {}
    revs = list(trees)
    for r in range(args.rounds):
        for rev in revs[r % len(revs):] + revs[: r % len(revs)]:
            env = child_env() | {"PYTHONPATH": str(trees[rev])}
            res = subprocess.run(
                [sys.executable, "-c", CHILD, str(trees[rev]), str(pages),
                 "untyped" if args.untyped else "typed"],
                capture_output=True, text=True, env=env, cwd=trees[rev], check=True)
            rounds = json.loads(res.stdout.strip().splitlines()[-1])
            wall[rev].append(min(w for w, _, _ in rounds))
            cpu[rev].append(min(c for _, c, _ in rounds))
            kind[rev] = rounds[0][2]
            print(f"round {r}: {rev} ({kind[rev]}) {wall[rev][-1] * 1e3:,.0f} ms wall, "
                  f"{cpu[rev][-1] * 1e3:,.0f} ms CPU; load average {os.getloadavg()[0]:.1f}",
                  flush=True)
    rows = [["revision", "decode", "best wall (median)", "best CPU (median)"]]
    for rev in revs:
        w, c = sorted(wall[rev]), sorted(cpu[rev])
        rows.append([f"{rev} ({trees[rev].name[4:]})", kind[rev],
                     f"{w[0] * 1e3:,.0f} ms ({w[len(w) // 2] * 1e3:,.0f})",
                     f"{c[0] * 1e3:,.0f} ms ({c[len(c) // 2] * 1e3:,.0f})"])
    print(f"\nexporter's share of a {args.objects:,}-object sync (decode + apply, as the "
          f"reflector), best of {args.rounds}, revisions interleaved")
    print(table(rows))


if __name__ == "__main__":
    main()
