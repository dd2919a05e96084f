"""Checkpoint cost at a production-sized fleet: the incremental SQLite store beside the whole-state
JSON file it replaced and beside an append-only journal of the same rows.

A fleet of long-lived units (zaroz_sim.fleet's backlog: every unit created, ready, accepting and
idle) is applied through the Pipeline, then K events of the steady stream at a time, and after
each batch one checkpoint is taken three ways:
- sqlite: `Checkpointer.save()` (the product: the changed rows, one WAL transaction, fsync),
  split into the part a scrape holds the event loop for (taking what changed) and the write
  (the writer thread's, off the loop);
- journal: the same rows as one JSON line appended to a file, fsync (no compaction counted);
- json v2: the whole state as one file, the way checkpoint.json was written (temp file, fsync,
  rename, fsync of the directory): the journal's compaction costs the same.
Figures: ms per checkpoint (best and median of the rounds), rows, bytes handed to write(2)
(/proc/self/io wchar, the mean of the rounds: WAL frames, and the pages copied back from the WAL
every few checkpoints, so take enough rounds to include some), and
restart-to-ready: a fresh Pipeline restored from the store, beside the old JSON load.

Run: python -m bench.checkpoint [--units 100000] [--workloads 100 1000] [--events 10 1000]
     [--rounds 5] [--traces]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from bench._common import OUT, header, table
from exporter.sinks.traces.otlp import TraceConfig, TraceSink
from exporter.wiring.checkpoint import Checkpointer
from exporter.wiring.events import Pipeline
from exporter.wiring.store import _WRITES, Changes
from zaroz_sim.fleet import Backlog, FleetShape, LiveFleet

NS = 1_000_000_000
START_NS = 1_700_000_000 * NS


class _Nowhere(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _wchar() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def _pipeline(traces: bool) -> Pipeline:
    sink = TraceSink(_Nowhere(), TraceConfig(backpressure=True), sdk=True) if traces else None
    return Pipeline(traces=sink)


def build(shape: FleetShape, traces: bool) -> tuple[Pipeline, Backlog]:
    backlog = Backlog(shape)
    p = _pipeline(traces)
    for w, wl in enumerate(backlog.workloads):
        events = [backlog.event(w, s) for s in range(1, shape.backlog_len(w) + 1)]
        p.workload(wl.id).offer_many(events, None)
    return p, backlog


def feed(p: Pipeline, live: LiveFleet, k: int, now: list[int]) -> int:
    """Apply about k events of the steady stream; returns how many."""
    n = 0
    while n < k:
        now[0] += max(1, int((k - n) / live.rate * NS))
        for wid, events in live.tick(now[0]).items():
            p.workload(wid).offer_many(events, None)
            n += len(events)
    return n


def _write_synced(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | mode, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def journal_append(path: Path, ch: Changes) -> int:
    """The journal design: the same rows, one line, appended and fsynced."""
    line = orjson.dumps({f: getattr(ch, f) for _, f in _WRITES},
                        default=lambda b: b.decode() if isinstance(b, bytes) else str(b)) + b"\n"
    _write_synced(path, line, os.O_APPEND)
    return len(line)


def json_save(directory: Path, cp: Checkpointer) -> int:
    """checkpoint.json as the exporter wrote it before the store (version 2, whole)."""
    state = cp.state()
    state["v"] = 2
    data = orjson.dumps(state)
    tmp = directory / "checkpoint.json.tmp"
    _write_synced(tmp, data, os.O_TRUNC)
    os.replace(tmp, directory / "checkpoint.json")
    dfd = os.open(directory, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
    return len(data)


def measured(fn: Callable[[], Any]) -> tuple[float, int, Any]:
    gc.collect()
    w0, t0 = _wchar(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, _wchar() - w0, out


def restart(directory: Path, traces: bool, old_json: bool) -> tuple[float, int]:
    """Seconds from a fresh Pipeline to every workload restored; the units restored."""
    gc.collect()
    t0 = time.perf_counter()
    p = _pipeline(traces)
    cp = Checkpointer(directory, p)
    if old_json:  # what load() did before the store: parse the file, restore from it
        state = orjson.loads((directory / "checkpoint.json").read_bytes())
        cp._restore(state, set())
    else:
        cp.load()
    dt = time.perf_counter() - t0
    n = sum(len(wl.units) for wl in p.logs.values())
    cp.close()
    return dt, n


def run(units: int, workloads: int, events: list[int], rounds: int, traces: bool,
        root: Path) -> list[list[str]]:
    shape = FleetShape(workloads=workloads, units=units, start_ns=START_NS)
    t0 = time.perf_counter()
    p, backlog = build(shape, traces)
    print(f"  {workloads} workloads: {units:,} units applied in {time.perf_counter() - t0:.1f} s",
          flush=True)
    store_dir, json_dir = root / f"sqlite-{workloads}", root / f"json-{workloads}"
    for d in (store_dir, json_dir):
        d.mkdir(parents=True)
    cp = Checkpointer(store_dir, p)
    slices = []  # the first save taken ahead, as a fresh process's first scrape takes it
    while True:
        t0 = time.perf_counter()
        more = cp.take_ahead_step()
        slices.append(time.perf_counter() - t0)
        if not more:
            break
    first, first_bytes, _ = measured(cp.save)
    rows: list[list[str]] = [
        [f"{workloads}", "first save: slices on the loop", "sqlite",
         f"{max(slices) * 1e3:,.1f} (max of {len(slices)}, med "
         f"{statistics.median(slices) * 1e3:,.1f})", "", ""],
        [f"{workloads}", "first save (whole, after its slices)", "sqlite",
         f"{first * 1e3:,.0f}", f"{cp.last_rows:,}", f"{first_bytes:,}"]]
    live = LiveFleet(backlog, rate=1000.0)
    now = [START_NS]
    live.tick(now[0])
    for k in events:
        res: dict[str, list[tuple[float, int, int]]] = {
            "sqlite: on the loop": [], "sqlite: writer thread": [], "sqlite": [],
            "journal": [], "json v2": []}
        for _ in range(rounds):
            feed(p, live, k, now)
            take, _, ch = measured(cp.changes)  # what a scrape holds the loop for
            write, wbytes, _ = measured(lambda ch=ch: cp.store.write(ch))
            cp._done(ch, time.perf_counter(), ch.size())
            res["sqlite: on the loop"].append((take, ch.rows(), 0))
            res["sqlite: writer thread"].append((write, ch.rows(), wbytes))
            res["sqlite"].append((take + write, ch.rows(), wbytes))
            jt, jb, _ = measured(lambda ch=ch: journal_append(json_dir / "journal", ch))
            res["journal"].append((take + jt, ch.rows(), jb))
            st, sb, _ = measured(lambda: json_save(json_dir, cp))
            res["json v2"].append((st, 0, sb))
        for name, xs in res.items():
            ms = sorted(x[0] * 1e3 for x in xs)
            rows.append([f"{workloads}", f"K={k}", name,
                         f"{ms[0]:,.1f} (med {statistics.median(ms):,.1f})",
                         f"{int(statistics.median(x[1] for x in xs)):,}" if name != "json v2"
                         else "whole", f"{int(statistics.mean(x[2] for x in xs)):,}"])
    cp.save()
    cp.close()
    for old in (False, True):
        dt, n = restart(json_dir if old else store_dir, traces, old)
        rows.append([f"{workloads}", "restart to ready", "json v2" if old else "sqlite",
                     f"{dt * 1e3:,.0f}", f"{n:,} units", ""])
    size = sum(f.stat().st_size for f in store_dir.iterdir())
    rows.append([f"{workloads}", "on disk", "sqlite", "", "",
                 f"{size:,} (json v2: {(json_dir / 'checkpoint.json').stat().st_size:,})"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=100_000)
    ap.add_argument("--workloads", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--events", type=int, nargs="+", default=[10, 1000],
                    help="K: events applied between two checkpoints")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--traces", action="store_true", help="with the trace sink's state too")
    args = ap.parse_args()
    header(f"checkpoint: {args.units:,} live units, K events between checkpoints"
           + (", traces on" if args.traces else ""))
    OUT.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="checkpoint-", dir=OUT))  # a real disk, not tmpfs
    try:
        rows = []
        for w in args.workloads:
            rows += run(args.units, w, args.events, args.rounds, args.traces, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(table([["workloads", "case", "design", "ms: best (median)", "rows",
                  "bytes written (mean)"], *rows]))


if __name__ == "__main__":
    main()
