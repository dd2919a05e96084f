"""Checkpoint cost at a production-sized fleet: the LevelDB store (an appended batch a checkpoint)
beside the SQLite store it replaced, an append-only journal of the same rows and the whole-state
JSON file.

A fleet of long-lived units (zaroz_sim.fleet's backlog: every unit created, ready, accepting and
idle) is applied through the Pipeline, then K events of the steady stream at a time, and after
each batch one checkpoint is taken, its rows written four ways:
- leveldb: the product (`Checkpointer`: what changed is taken on the event loop, then the
  writer thread appends it to LevelDB's log as one batch, fsynced); its background compaction
  is counted from LevelDB's own thread;
- sqlite: the same rows as one WAL transaction into version 3's `state.db` (fsync);
- journal: the same rows as one JSON line appended to a file, fsync (no compaction counted);
- json v2: the whole state as one file, the way checkpoint.json was written (temp file, fsync,
  rename, fsync of the directory).
Figures: ms per checkpoint (best and median of the rounds), rows, bytes handed to write(2)
(/proc/thread-self/io wchar of the writing thread, the mean of the rounds; LevelDB's
compactions run in its own thread and are counted from the process's total). Then a stream of
`--stream` events, K=1,000 at a time, written by both stores: bytes written per event beside
the bytes of the rows that changed, and each directory's size beside the state's (the JSON
file). Last, restart-to-ready: a fresh Pipeline restored from each.

Run: python -m bench.checkpoint [--units 100000] [--workloads 100 1000] [--events 10 1000]
     [--rounds 10] [--stream 60000] [--traces]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from bench._common import OUT, header, table
from exporter.sinks.traces.otlp import TraceConfig, TraceSink
from exporter.wiring.events import Pipeline
from exporter.wiring.state import convert
from exporter.wiring.state.checkpoint import Checkpointer
from exporter.wiring.state.store import _KINDS, Changes
from zaroz_sim.fleet import Backlog, FleetShape, LiveFleet

NS = 1_000_000_000
START_NS = 1_700_000_000 * NS


class _Nowhere(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _wchar(who: str = "thread-self") -> int:
    """Bytes handed to write(2) by this thread (or "self": the whole process)."""
    with open(f"/proc/{who}/io") as f:
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
    line = orjson.dumps({f: getattr(ch, f) for f, _, _ in _KINDS},
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


def restart(directory: Path, traces: bool, design: str) -> tuple[float, int]:
    """Seconds from a fresh Pipeline to every workload restored; the units restored."""
    gc.collect()
    t0 = time.perf_counter()
    p = _pipeline(traces)
    cp = Checkpointer(directory, p)
    if design == "json v2":  # what load() did before the stores: parse the file, restore
        cp._restore(orjson.loads((directory / "checkpoint.json").read_bytes()), set())
    elif design == "sqlite":  # what load() did with version 3
        state = cp.legacy.read()
        assert state is not None
        cp._restore(state, set())
        cp.legacy.close()
    else:
        cp.load()
    dt = time.perf_counter() - t0
    n = sum(len(wl.units) for wl in p.logs.values())
    cp.close()
    return dt, n


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class _Both:
    """Each checkpoint's rows written by the product's store and by version 3's, timed apart."""

    def __init__(self, cp: Checkpointer, sqlite: convert.Store) -> None:
        self.cp, self.sqlite = cp, sqlite
        self.history: list[Changes] = []  # every checkpoint's rows, for the candidates

    def save(self) -> tuple[Changes, dict[str, tuple[float, int]]]:
        """One checkpoint: (its rows, {part: (seconds, bytes)})."""
        out: dict[str, tuple[float, int]] = {}
        take, _, ch = measured(self.cp._prepare)  # what a scrape holds the loop for
        assert ch is not None
        out["on the loop"] = (take, 0)
        p0 = _wchar("self")
        write, wbytes, _ = measured(lambda: self.cp.store.write(ch))
        out["leveldb"] = (write, wbytes)
        self.cp._done(ch, time.perf_counter(), (ch.rows(), ch.size()))
        sql, sbytes, _ = measured(lambda: self.sqlite.write(ch))
        out["sqlite"] = (sql, sbytes)
        out["background"] = (0.0, _wchar("self") - p0 - wbytes - sbytes)  # LevelDB's thread
        self.history.append(ch)
        return ch, out


def _ticks_beside(fn: Callable[[], Any]) -> tuple[int, float]:
    """Run fn while a thread beside it wakes every 0.25 ms: (its wake-ups during fn, fn's
    seconds). A call that holds the GIL leaves it few (the event loop is held as long)."""
    ticks: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            time.sleep(0.00025)
            ticks.append(time.perf_counter())

    t = threading.Thread(target=tick)
    t.start()
    time.sleep(0.002)
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    stop.set()
    t.join()
    return sum(1 for x in ticks if t0 < x < t1), t1 - t0


def rocksdict_candidate(history: list[Changes], stream_from: int, streamed: int,
                        row_bytes: int, root: Path, workloads: int) -> list[list[str]]:
    """The same checkpoints replayed into RocksDB (rocksdict, when installed: not a
    dependency) configured as the LevelDB is (8 MiB memtable, synced WAL), alone in the process:
    bytes per streamed event, and how much of a write the GIL is free beside it, LevelDB's
    write measured the same way on the same batches."""
    try:
        import plyvel
        import rocksdict
    except ImportError:
        return [[f"{workloads}", "candidate", "rocksdict", "not installed", "", ""]]
    from exporter.wiring.state.store import MEMTABLE, Unstored, _fill, _open

    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_size(MEMTABLE)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    opts.set_wal_recovery_mode(rocksdict.DBRecoveryMode.point_in_time())
    sync = rocksdict.WriteOptions()
    sync.sync = True
    rdb = rocksdict.Rdict(str(root / f"rocksdict-{workloads}"), opts)
    ldb = _open(root / f"leveldb-probe-{workloads}")
    out: list[list[str]] = []
    free = {"rocksdict": [0, 0.0], "leveldb": [0, 0.0]}
    try:
        batches = []
        for ch in history:
            u = Unstored()
            u.add(ch)
            rb, lb = rocksdict.WriteBatch(raw_mode=True), ldb.write_batch(sync=True)
            _fill(lb, u.items(), ch.spans_through, None)
            _fill(rb, u.items(), ch.spans_through, None)
            batches.append((rb, lb))
        w0 = 0
        for i, (rb, _) in enumerate(batches):  # RocksDB alone: its threads' writes counted
            if i == stream_from:
                w0 = _wchar("self")
            n, dt = _ticks_beside(lambda rb=rb: rdb.write(rb, sync))
            free["rocksdict"][0] += n
            free["rocksdict"][1] += dt
        time.sleep(1.0)  # a flush or compaction the last writes began
        written = _wchar("self") - w0
        for _, lb in batches:
            n, dt = _ticks_beside(lb.write)
            free["leveldb"][0] += n
            free["leveldb"][1] += dt
        out.append([f"{workloads}", f"stream of {streamed:,}: per event", "rocksdict", "",
                    f"rows {row_bytes / streamed:,.0f} B",
                    f"{written / streamed:,.0f} B ({written / row_bytes:.1f}x the rows)"])
        for name, (n, dt) in free.items():
            out.append([f"{workloads}", "a thread beside the writes", name,
                        f"{dt * 1e3:,.0f} ms of writes", "",
                        f"woke {n:,} times of ~{dt / 0.00025:,.0f} if the GIL were free"])
    finally:
        rdb.close()
        ldb.close()
        del plyvel
    return out


def run(units: int, workloads: int, events: list[int], rounds: int, stream: int, traces: bool,
        root: Path) -> list[list[str]]:
    shape = FleetShape(workloads=workloads, units=units, start_ns=START_NS)
    t0 = time.perf_counter()
    p, backlog = build(shape, traces)
    print(f"  {workloads} workloads: {units:,} units applied in {time.perf_counter() - t0:.1f} s",
          flush=True)
    store_dir, sqlite_dir, json_dir = (root / f"{d}-{workloads}"
                                       for d in ("leveldb", "sqlite", "json"))
    for d in (store_dir, sqlite_dir, json_dir):
        d.mkdir(parents=True)
    cp = Checkpointer(store_dir, p)
    slices = []  # the first save taken ahead, as a fresh process's first scrape takes it
    while True:
        t0 = time.perf_counter()
        more = cp.take_ahead_step()
        slices.append(time.perf_counter() - t0)
        if not more:
            break
    both = _Both(cp, convert.Store(sqlite_dir / convert.DB))
    ch, first = both.save()
    rows: list[list[str]] = [
        [f"{workloads}", "first save (whole)", design, f"{first[design][0] * 1e3:,.0f}",
         f"{ch.rows():,}", f"{first[design][1]:,}"] for design in ("leveldb", "sqlite")]
    rows.insert(0, [f"{workloads}", "first save: slices on the loop", "leveldb",
                    f"{max(slices) * 1e3:,.1f} (max of {len(slices)}, med "
                    f"{statistics.median(slices) * 1e3:,.1f})", "", ""])
    live = LiveFleet(backlog, rate=1000.0)
    now = [START_NS]
    live.tick(now[0])
    for k in events:
        res: dict[str, list[tuple[float, int, int]]] = {
            "leveldb: on the loop": [], "leveldb: writer thread": [], "leveldb": [],
            "sqlite": [], "journal": [], "json v2": []}
        for _ in range(rounds):
            feed(p, live, k, now)
            ch, parts = both.save()
            take = parts["on the loop"][0]
            (lw, lb), (sw, sb) = parts["leveldb"], parts["sqlite"]
            res["leveldb: on the loop"].append((take, ch.rows(), 0))
            res["leveldb: writer thread"].append((lw, ch.rows(), lb))
            res["leveldb"].append((take + lw, ch.rows(), lb + parts["background"][1]))
            res["sqlite"].append((take + sw, ch.rows(), sb))
            jt, jb, _ = measured(lambda ch=ch: journal_append(json_dir / "journal", ch))
            res["journal"].append((take + jt, ch.rows(), jb))
            st, sz, _ = measured(lambda: json_save(json_dir, cp))
            res["json v2"].append((st, 0, sz))
        for name, xs in res.items():
            ms = sorted(x[0] * 1e3 for x in xs)
            rows.append([f"{workloads}", f"K={k}", name,
                         f"{ms[0]:,.1f} (med {statistics.median(ms):,.1f})",
                         f"{int(statistics.median(x[1] for x in xs)):,}" if name != "json v2"
                         else "whole", f"{int(statistics.mean(x[2] for x in xs)):,}"])
    # The stream: bytes a streamed event costs each store, compactions included.
    stream_from = len(both.history)
    streamed, row_bytes = 0, 0
    written = {"leveldb": 0, "sqlite": 0}
    t0 = time.perf_counter()
    while streamed < stream:
        streamed += feed(p, live, 1000, now)
        ch, parts = both.save()
        row_bytes += ch.size()
        written["leveldb"] += parts["leveldb"][1] + parts["background"][1]
        written["sqlite"] += parts["sqlite"][1]
    state_bytes = json_save(json_dir, cp)
    print(f"  {workloads} workloads: {streamed:,} events streamed, saved every 1,000, in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    for design, n in written.items():
        d = store_dir if design == "leveldb" else sqlite_dir
        rows.append([f"{workloads}", f"stream of {streamed:,}: per event", design, "",
                     f"rows {row_bytes / streamed:,.0f} B",
                     f"{n / streamed:,.0f} B ({n / row_bytes:.1f}x the rows)"])
        rows.append([f"{workloads}", "dir / state (json v2 size)", design, "", "",
                     f"{_dir_bytes(d):,} / {state_bytes:,} = "
                     f"{_dir_bytes(d) / state_bytes:.2f}"])
    rows += rocksdict_candidate(both.history, stream_from, streamed, row_bytes, root, workloads)
    cp.save()
    cp.close()
    both.sqlite.close()
    for design, d in (("leveldb", store_dir), ("sqlite", sqlite_dir), ("json v2", json_dir)):
        dt, n = restart(d, traces, design)
        rows.append([f"{workloads}", "restart to ready", design, f"{dt * 1e3:,.0f}",
                     f"{n:,} units", ""])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=100_000)
    ap.add_argument("--workloads", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--events", type=int, nargs="+", default=[10, 1000],
                    help="K: events applied between two checkpoints")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--stream", type=int, default=60_000,
                    help="events streamed (saved every 1,000) for bytes per event and dir size")
    ap.add_argument("--traces", action="store_true", help="with the trace sink's state too")
    args = ap.parse_args()
    header(f"checkpoint: {args.units:,} live units, K events between checkpoints"
           + (", traces on" if args.traces else ""))
    OUT.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="checkpoint-", dir=OUT))  # a real disk, not tmpfs
    try:
        rows = []
        for w in args.workloads:
            rows += run(args.units, w, args.events, args.rounds, args.stream, args.traces,
                        root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(table([["workloads", "case", "design", "ms: best (median)", "rows",
                  "bytes written (mean)"], *rows]))


if __name__ == "__main__":
    main()
