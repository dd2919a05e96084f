"""What keeping the UnitSignal model's memory in the checkpoint costs, at 100k objects.

The objects are bench.cluster's (the same mix, made through the emulator's write API, in this
process), handed to the exporter as typed LIST pages of 500, as the reflector does. Measured:

1. the memory's size: each object's record as stored (bytes of its JSON), and the store's
   file per object after the first (whole) save;
2. saves: the first, whole (every object's row with the rest of the state), and one after
   `--events` watch events (only the touched objects' rows);
3. a restart: `Checkpointer.load` (restoring the memory: each object known again, its
   per-object series back) and then the relist, against today's restart without the memory
   (a load of the same store without its rows, then the relist measuring every object again
   at first sight);
4. the watch path: `--events` typed MODIFIED lines through `model.upsert`, with the changes
   tracked (the checkpoint's O(1) mark per event) against untracked (no checkpoint), and the
   initial sync both ways; interleaved, best of `--repeat`.

Run: python -m bench.unitsignal_memory [--objects N] [--events N] [--repeat K]
"""

from __future__ import annotations

import argparse
import gc
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from bench._common import interleaved
from bench.cluster import NS, EventSource, FakeClock, Shape, apply_lines_typed, fresh_model
from bench.cluster import populate as populate_cluster
from exporter.model.unitsignals import UnitSignalModel
from exporter.sources.kube.typed import decode_list
from exporter.wiring.events import Pipeline
from exporter.wiring.state.checkpoint import Checkpointer
from exporter.wiring.state.store import DB
from exporter.wiring.unitsignals import NamespaceHandler, SignalMemory, build_cluster
from zaroz_sim.kube.emulator import KubeEmulator

PAGE = 500
HEAD = b'{"kind":"UnitSignalList","apiVersion":"units.zaroz.cloud/v1","metadata":{},"items":['


def pages_of(raws: list[bytes]) -> list[bytes]:
    return [HEAD + b",".join(raws[i:i + PAGE]) + b"]}" for i in range(0, len(raws), PAGE)]


def list_into(model: UnitSignalModel, pages: list[bytes], now: float) -> float:
    """A (re)list as the reflector applies it: typed pages, `list_page`, then `list_done`."""
    handler = NamespaceHandler(model, None)
    listed: set[tuple[str, str]] = set()
    gc.disable()
    t = time.perf_counter()
    try:
        for page in pages:
            fit = decode_list(page)
            assert fit is not None
            listed.update(handler.list_page(fit[0], now))
        handler.list_done(listed, now)
    finally:
        gc.enable()
    return time.perf_counter() - t


def cluster(state_dir: Path) -> tuple[Checkpointer, UnitSignalModel, Pipeline]:
    p = Pipeline()
    model, _ = build_cluster(p.registry, ("team",))
    return Checkpointer(state_dir, p, signals=SignalMemory(model)), model, p


def ready_count(p: Pipeline) -> int:
    return sum(s.count for s in p.registry["zaroz_unitsignal_ready_seconds"].series.values())


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def restart(state_dir: Path, pages: list[bytes], now: float) -> dict[str, float]:
    cp, model, p = cluster(state_dir)
    gc.collect()
    load_s, _ = timed(cp.load)
    relist_s = list_into(model, pages, now)
    save_s, _ = timed(cp.save)
    out = {"load_s": load_s, "relist_s": relist_s, "save_s": save_s, "rows": cp.last_rows,
           "ready": ready_count(p), "objects": len(model.objects)}
    cp.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    shape = Shape(objects=args.objects, namespaces=20, workloads=200, user_data=256, seed=1)
    clock = FakeClock(time.time_ns() - 86_400 * NS, NS // 4)
    emu = KubeEmulator(seed=shape.seed, clock=clock)
    t0 = time.perf_counter()
    populate_cluster(emu, shape, clock)
    raws = list(emu.store.raw.values())
    print(f"{len(raws)} objects made in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    del emu
    gc.collect()
    pages = pages_of(raws)
    now = time.time()
    rows: list[tuple[str, str]] = []

    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        cp, model, p = cluster(state)
        cp.load()
        sync_s = list_into(model, pages, now)
        records = [len(msgspec.json.encode(r)) for _, r in model.memory()]
        first_s, _ = timed(cp.save)
        db_bytes = sum(f.stat().st_size for f in state.iterdir() if f.name.startswith(DB))
        table_bytes = _table_bytes(state / DB)
        rows += [
            ("objects", f"{len(model.objects):,}"),
            ("initial sync (tracked)", f"{sync_s:.2f} s"),
            ("record per object: mean / p50 / max", f"{statistics.mean(records):.0f} / "
             f"{statistics.median(records):.0f} / {max(records)} B"),
            ("first (whole) save", f"{first_s * 1e3:.0f} ms, {cp.last_rows:,} rows"),
            ("store after it (with its WAL), per object", f"{db_bytes / len(model.objects):.0f}"
             f" B ({db_bytes / 2**20:.1f} MiB)"),
            ("the memory's table, per object", f"{table_bytes / len(model.objects):.0f} B "
             f"({table_bytes / 2**20:.1f} MiB)"),
        ]
        src = EventSource(raws, 10**9, 7)
        lines = src.lines(args.events)
        apply_lines_typed(model, lines)
        inc_s, _ = timed(cp.save)
        rows.append((f"save after {args.events:,} watch events",
                     f"{inc_s * 1e3:.0f} ms, {cp.last_rows:,} rows"))
        cp.close()
        # the relist sees the objects as they are now
        pages = pages_of(src.objects)
        del model, p, cp
        gc.collect()

        with_memory = restart(state, pages, now + 60)
        again = restart(state, pages, now + 120)
        # today's restart: the same store without the memory's rows
        db = sqlite3.connect(state / DB)
        with db:
            db.execute("DELETE FROM unitsignals")
            db.execute("DELETE FROM meta WHERE key = 'unitsignals'")
        db.close()
        without = restart(state, pages, now + 180)
        for name, r in (("restart with the memory", with_memory),
                        ("restart with the memory (again)", again),
                        ("restart without (as before)", without)):
            rows.append((name, f"load {r['load_s']:.2f} s + relist {r['relist_s']:.2f} s "
                               f"= {r['load_s'] + r['relist_s']:.2f} s; save after "
                               f"{r['save_s'] * 1e3:.0f} ms, {r['rows']:,} rows; readiness "
                               f"observations {r['ready']:,}"))

    # the watch path: tracked (a checkpoint) against untracked, on the same objects and lines
    _, a = fresh_model()
    _, b = fresh_model()
    list_into(a, pages, now)
    list_into(b, pages, now)
    b.track()
    src = EventSource(src.objects, 2 * 10**9, 8)
    batches = [src.lines(args.events) for _ in range(args.repeat)]
    it_a, it_b = iter(batches), iter(batches)

    def run(m: UnitSignalModel, it: Any) -> float:
        lines = next(it)
        gc.disable()
        t = time.perf_counter()
        apply_lines_typed(m, lines)
        d = time.perf_counter() - t
        gc.enable()
        if m.touched is not None:
            m.take_memory()
        return d

    times = interleaved({"untracked": lambda: run(a, it_a),
                         "tracked": lambda: run(b, it_b)}, args.repeat)
    for name, ts in times.items():
        best, med = min(ts), statistics.median(ts)
        rows.append((f"watch events/s, {name} (best / median)",
                     f"{args.events / best:,.0f} / {args.events / med:,.0f}"))
    syncs = interleaved({
        "untracked": lambda: list_into(fresh_model()[1], pages, now),
        "tracked": lambda: _tracked_sync(pages, now),
    }, max(1, args.repeat // 2))
    for name, ts in syncs.items():
        rows.append((f"initial sync, {name} (best / median)",
                     f"{min(ts):.2f} / {statistics.median(ts):.2f} s"))
    width = max(len(n) for n, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def _table_bytes(path: Path) -> int:
    """Bytes of the pages of the memory's table (SQLite's dbstat), read beside the writer."""
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT sum(pgsize) FROM dbstat WHERE name = 'unitsignals'")
                   .fetchone()[0] or 0)
    finally:
        db.close()


def _tracked_sync(pages: list[bytes], now: float) -> float:
    _, model = fresh_model()
    model.track()
    return list_into(model, pages, now)


if __name__ == "__main__":
    main()
