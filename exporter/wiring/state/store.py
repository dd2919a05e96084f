"""The checkpoint's store: a LevelDB (plyvel) in `--state-dir`/store, whose commit is an append.

A checkpoint is one write batch holding only what changed since the last one (`Changes`: rows
put or removed, keyed by kind and key), appended to LevelDB's log, checksummed and fsynced once;
LevelDB folds the log into sorted, compressed tables in its own background thread (C++, without
the GIL) and deletes the logs and tables it no longer needs. A restore opens it (the tables,
then the log since, whose torn or corrupt tail is cut at the last whole batch) and reads every
row (`read`), in the form the version-2 JSON checkpoint had, so every version restores through
one path.

Chosen by `python -m bench.checkpoint` (100,000 units, 1,000 workloads, a checkpoint every
1,000 events of the stream, compactions counted): LevelDB wrote 557 B per event with JSON rows
(1.7x the rows that changed; SQLite's B-tree wrote 3,817 B, 11.4x), 522 B with MessagePack rows
and a 16 MiB memtable since (1.4x; bench/README); its directory stays at 1.3x the state
(SQLite 2.1x), and it restores in 1.8 s against 2.9 s on a loaded machine. RocksDB (rocksdict)
writes as few bytes (612 B) but holds the GIL through its write and fsync: a thread beside its
writes ran 360 times of a possible ~5,500 (beside LevelDB's: 2,010 of ~4,500), so its commit
would hold the event loop.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from hashlib import blake2b
from pathlib import Path
from typing import Any

import msgspec
import orjson
import plyvel

from exporter.sinks.metrics.state import state_of_rows

DB = "store"  # the LevelDB's directory in the state dir
# The checkpoint format: 1 and 2 were checkpoint.json, 3 SQLite's state.db, 4 this store with
# its rows as JSON; 5 writes them as MessagePack (no quotes, no escapes in the JSON text a row
# holds: 5-11% fewer disk bytes an event at 1,000 workloads, bench.checkpoint) and reads both
# (`row_of`), so a store of version 4 is read as it is and becomes version 5 at its first
# commit. An exporter of version 4 refuses a store of version 5 at start, with one line (an
# upgrade is one-way, as from SQLite's).
VERSION = 5
READS = (4, 5)
# The memtable: the log grows to this before LevelDB writes it out as a table, so a row changed
# several times in between is written to a table once (~25 s of changes at 1,000 events/s with a
# save every 0.25 s; the state dir holds at most about this much log beside the tables). 16 MiB
# rather than LevelDB's 4 or our 8 of before: at 1,000 workloads 502 B an event against 600 B,
# for ~10 MiB more RSS (bench.fleet, same code, 2026-12-04).
MEMTABLE = 16 << 20
TABLE_FILE = 4 << 20  # LevelDB's table files (its default, 2 MiB, makes twice the files)
# LevelDB's block cache (its default: 8 MiB). It serves no hot read: a restore reads every row
# once (without filling it: `FILL_ON_READ`), commits only write, and the rare reads (a dropped
# workload's rows, the spans handled) are of recent blocks. The default stayed full after a
# restore, ~8 MiB of RSS for nothing (`python -m bench.store_cache`).
BLOCK_CACHE = 1 << 20
FILL_ON_READ = False
_VKEY = b"\x00v"  # the store's format version (no kind's prefix starts with \0)


def key(n: int) -> dict[str, int]:
    """A kind of row in `Changes` (its field's metadata): tuples whose first `n` fields are its
    key (a later row of that key replaces it). Declaring the field is all it takes for the store
    to write, merge and read it back (`read()["rows"][name]` for a kind `read` does not
    assemble itself)."""
    return {"key": n}


def gone(kind: str) -> dict[str, str]:
    """The keys of `kind`'s rows removed (a tuple of its key fields each)."""
    return {"gone": kind}


SeriesRow = tuple[str, str, float | None, str | None]  # family, labels, value, histogram


@dataclass
class Changes:
    """The rows of one checkpoint. `full`: the store is replaced (a first save, a conversion)."""

    full: bool = False
    # Workloads dropped (another shard's, or gone from the route): every row of theirs goes
    # (its own, its units, its waiting events, its open traces: `_BY_WORKLOAD`); their series
    # go as `series_gone`. Removed before anything is written, so one made again is new.
    workloads_gone: list[tuple[str]] = field(default_factory=list, metadata=gone("workloads"))
    workloads: list[tuple[str, str]] = field(default_factory=list, metadata=key(1))
    units: list[tuple[Any, ...]] = field(default_factory=list, metadata=key(2))
    units_gone: list[tuple[str, str]] = field(default_factory=list, metadata=gone("units"))
    pending: list[tuple[str, int, str | None]] = field(default_factory=list, metadata=key(2))
    pending_gone: list[tuple[str, int]] = field(default_factory=list, metadata=gone("pending"))
    series: list[SeriesRow] = field(default_factory=list, metadata=key(2))
    series_gone: list[tuple[str, str]] = field(default_factory=list, metadata=gone("series"))
    traces: list[tuple[str, str, str]] = field(default_factory=list, metadata=key(2))
    traces_gone: list[tuple[str, str]] = field(default_factory=list, metadata=gone("traces"))
    spans: list[tuple[int, str]] = field(default_factory=list, metadata=key(1))
    meta: list[tuple[str, str]] = field(default_factory=list, metadata=key(1))
    # The UnitSignal model's memory (model.unitsignals `memory`): (namespace, name, record as
    # JSON) of the objects touched, (namespace, name) of those gone.
    unitsignals: list[tuple[str, str, str]] = field(default_factory=list, metadata=key(2))
    unitsignals_gone: list[tuple[str, str]] = field(default_factory=list,
                                                    metadata=gone("unitsignals"))
    # Start times of the cumulative series (sinks/metrics/otlp/starts.py): (family, labels as
    # in `series`, ns) of the series new since the last save, (family, labels) of those gone.
    starts: list[tuple[str, str, int]] = field(default_factory=list, metadata=key(2))
    starts_gone: list[tuple[str, str]] = field(default_factory=list, metadata=gone("starts"))
    spans_through: int = 0  # stored spans up to this serial are handled: they go
    held_through: int = 0  # the spans held up to this serial are in `spans`: once durable,
    # they may leave (Outbox.saved)

    def rows(self) -> int:
        """Rows written or removed."""
        return sum(len(getattr(self, f)) for f, _, _ in _KINDS)

    def size(self) -> int:
        """Bytes of the rows written: their text and blob fields, 8 per number."""
        return sum(_size(r) for f, _, _ in _KINDS for r in getattr(self, f))


# (field, kind, key length: None for a field of removed keys), removals first: a row removed
# and made again in one interval ends as its new row.
_KINDS: list[tuple[str, str, int | None]] = sorted(
    ((f.name, f.metadata.get("gone", f.name), f.metadata.get("key"))
     for f in fields(Changes) if "key" in f.metadata or "gone" in f.metadata),
    key=lambda k: k[2] is not None)
_KEYS = {kind: n for _, kind, n in _KINDS if n is not None}
_PREFIX = {kind: kind.encode() + b"\0" for kind in _KEYS}
_KIND_OF = {p: kind for kind, p in _PREFIX.items()}


def _size(row: Sequence[Any]) -> int:
    return sum(len(v) if isinstance(v, str | bytes) else 8 for v in row)


# Kinds keyed by a workload, then a key of their own: their keys begin with the workload's
# hash, so a dropped workload's rows are found by that prefix (`_drop`).
_BY_WORKLOAD = ("units", "pending", "traces")


def _h8(text: str) -> bytes:
    return blake2b(text.encode(), digest_size=8).digest()


def _key(kind: str, key: Sequence[Any]) -> bytes:
    """A row's key: its kind, then its key fields: numbers alone big-endian (the spans sort by
    serial), anything else as 8 bytes of BLAKE2b (a unit's key is 25 bytes instead of ~45,
    every time it is written; two keys of a kind sharing a hash: about 1 in 10^9 at 200,000);
    a workload's rows (`_BY_WORKLOAD`) begin with its hash."""
    if kind in _BY_WORKLOAD:
        own = key[1]
        return _PREFIX[kind] + _h8(key[0]) + (
            (own + (1 << 63)).to_bytes(8, "big") if type(own) is int else _h8(str(own)))
    if len(key) == 2 and type(key[0]) is str and type(key[1]) is str:  # most rows
        text = f"{key[0]}\0{key[1]}"
    elif all(type(v) is int for v in key):
        return _PREFIX[kind] + b"".join((v + (1 << 63)).to_bytes(8, "big") for v in key)
    else:
        text = "\0".join(v if isinstance(v, str) else str(v) for v in key)
    return _PREFIX[kind] + blake2b(text.encode(), digest_size=8).digest()


Op = tuple[str, Sequence[Any], Sequence[Any] | None]  # kind, key, row (None: removed)


def _ops(changes: Changes) -> Iterator[Op]:
    """A Changes' rows in the order written: removals first, so a row removed and made again
    in one interval ends as its new row."""
    for name, kind, n in _KINDS:
        if n is None:
            for k in getattr(changes, name):
                yield kind, k, None
        else:
            for r in getattr(changes, name):
                yield kind, r[:n], r


_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder().decode
_exact = msgspec.json.decode  # JSON rows: any integer exactly (orjson's would be a float)
_JSON = ord("[")  # a JSON row's first byte; a MessagePack array never begins so


def _dumps(row: Sequence[Any]) -> bytes:
    try:
        return _pack(row)
    except OverflowError:  # an integer beyond 64 bits (a histogram's sum is kept as text)
        return json.dumps(row, separators=(",", ":")).encode()  # JSON holds any


def row_of(value: bytes) -> Any:
    """A stored row: MessagePack, or JSON (version 4's rows, and one with an integer beyond 64
    bits), told apart by the first byte."""
    return _exact(value) if value[0] == _JSON else _unpack(value)


def _fill(batch: Any, ops: Iterable[Op], spans_through: int, keys: set[bytes] | None) -> None:
    """Put `ops` into `batch` in order (a later op of a key wins; a span up to `spans_through`
    is removed); `keys`: collects the keys put."""
    for kind, key, r in ops:
        k = _key(kind, key)
        if r is None or (kind == "spans" and key[0] <= spans_through):
            batch.delete(k)
        else:
            batch.put(k, _dumps(r))  # encoded into the batch, never kept: orjson's bytes
            # hold ~4 KiB each (100k of them kept would cost ~400 MiB)
            if keys is not None:
                keys.add(k)


def _drop(db: Any, batch: Any, workloads: Iterable[str]) -> None:
    """Remove every row of these workloads' kinds (`_BY_WORKLOAD`) from the store, into
    `batch`, before the batch's puts (a workload made again is written anew after it)."""
    for w in workloads:
        h = _h8(w)
        for kind in _BY_WORKLOAD:
            for k in db.iterator(prefix=_PREFIX[kind] + h, include_value=False):
                batch.delete(k)


class Unstored:
    """What failed writes took and did not store: a key's latest row (None: removed) wins, so
    it is bounded by the keys, however long the writes fail."""

    def __init__(self) -> None:
        self.full = False
        self.dropped: set[str] = set()  # workloads whose stored rows go first
        self.ops: dict[tuple[str, tuple[Any, ...]], Sequence[Any] | None] = {}
        self.spans_through = 0
        self.rows = self.size = 0  # of every Changes added (a key written twice counts twice)

    def add(self, changes: Changes) -> None:
        if changes.full:  # everything: what came before it is in it
            self.full, self.ops, self.rows, self.size = True, {}, 0, 0
            self.dropped = set()
        self.rows += changes.rows()
        self.size += changes.size()
        ops = self.ops
        if changes.workloads_gone:  # what was kept of them goes too, before what follows
            gone = {w for (w,) in changes.workloads_gone}
            self.dropped |= gone
            for op in [op for op in ops if op[0] in _BY_WORKLOAD and op[1][0] in gone]:
                del ops[op]
        for kind, key, r in _ops(changes):
            ops[kind, tuple(key)] = r
        self.spans_through = max(self.spans_through, changes.spans_through)

    def items(self) -> Iterator[Op]:
        for (kind, key), r in self.ops.items():
            yield kind, key, r


class Store:
    """The LevelDB, opened on first use; used by one thread at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: plyvel.DB | None = None
        self.spans_through = 0  # the last `spans_through` stored
        self.unstored: Unstored | None = None  # taken by failed writes, folded into the next
        self._log: str | None = None  # the newest log file, its directory entry durable
        self._versioned = False  # this process committed once (so wrote VERSION)

    def exists(self) -> bool:
        return (self.path / "CURRENT").exists()

    def _open(self) -> plyvel.DB:
        if self._db is None:
            self._db = _open(self.path)
            self._log = _newest_log(self.path)  # opening wrote a manifest: LevelDB synced
        return self._db

    def _sync_new_log(self) -> None:
        """LevelDB fsyncs the directory for a new MANIFEST only: the log file it makes at a
        memtable switch holds commits fsynced (sync=True) whose file may have no durable
        directory entry until the next manifest, so a power loss in between would lose
        them, acknowledged. After a commit into a new log, the directory is fsynced."""
        newest = _newest_log(self.path)
        if newest != self._log:
            fsync_path(self.path)
            self._log = newest

    def write(self, changes: Changes) -> tuple[int, int]:
        """One batch: all of `changes` and of the writes that failed before it, or (killed, or
        failing) none of them; a failed write's changes are kept for the next one. Returns the
        rows and bytes written (`Changes.rows`, `.size`), those folded in included."""
        pending = self.unstored
        if pending is not None:
            pending.add(changes)
        try:
            if pending is None:  # the usual case: straight from the rows taken
                self._commit(_ops(changes), changes.full, changes.spans_through,
                             [w for (w,) in changes.workloads_gone])
            else:
                self._commit(pending.items(), pending.full, pending.spans_through,
                             pending.dropped)
        except BaseException:
            if pending is None:
                self.unstored = pending = Unstored()
                pending.add(changes)
            self.close()  # LevelDB refuses every write after a failed one: open it again
            raise
        self.unstored = None
        if pending is None:
            self.spans_through = max(self.spans_through, changes.spans_through)
            return changes.rows(), changes.size()
        self.spans_through = max(self.spans_through, pending.spans_through)
        return pending.rows, pending.size

    def _commit(self, ops: Iterable[Op], full: bool, spans_through: int,
                dropped: Iterable[str] = ()) -> None:
        db = self._open()
        batch = db.write_batch(sync=True)
        keys: set[bytes] | None = set() if full else None
        if not full:
            _drop(db, batch, dropped)
        _fill(batch, ops, spans_through, keys)
        if keys is not None:  # the rows the store held that this state has not
            for k in db.iterator(include_value=False):
                if k not in keys:
                    batch.delete(k)
            batch.put(_VKEY, str(VERSION).encode())
        elif spans_through > self.spans_through:  # the spans handled since
            start = _PREFIX["spans"]
            stop = _key("spans", (spans_through,)) + b"\0"
            for k in db.iterator(start=start, stop=stop, include_value=False):
                batch.delete(k)
        if not full and not self._versioned:  # a store of an earlier version read as this
            batch.put(_VKEY, str(VERSION).encode())  # one: now it is
        self._append(batch)
        self._versioned = True  # (once appended: a failed write leaves it for the next)
        self._sync_new_log()

    def _append(self, batch: Any) -> None:
        """The commit: the batch appended to the log and fsynced (a test kills it here)."""
        batch.write()

    def read(self) -> dict[str, Any] | None:
        """The stored state in the version-2 checkpoint's form (with "v": 4, and "rows": the
        rows of the kinds it does not assemble, by kind); None when the store holds no
        checkpoint (never committed one)."""
        db = self._open()
        with db.snapshot() as snap:
            return _read(snap)

    def verify(self, *, decode: bool = True) -> list[str]:
        """The store's integrity problems, one line each; empty: sound (an absent store, or
        one that never committed a checkpoint, is sound). Reads every row with its checksums
        (LevelDB's, of each log record and table block) beside a running exporter (on a
        copy, without its lock): each row's kind and key, the format version, and (`decode`)
        that `read()` decodes the whole checkpoint. Never raises for what it finds."""
        if not self.exists():
            return []
        try:
            with self._reader() as db:
                problems = [f"{self.path}: {p}" for p in _verify(db)]
                if not problems and decode:
                    with db.snapshot() as snap:
                        _read(snap)
                return problems
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
            return [f"{self.path}: undecodable checkpoint ({e.__class__.__name__}: {e})"]
        except Exception as e:  # a store it cannot open is a problem too
            return [f"{self.path}: cannot be read: {e.__class__.__name__}: {e}"]

    def backup(self, dest: Path) -> None:
        """A consistent copy of the last committed checkpoint into the directory `dest` (made
        if absent; it must hold no store), which opens as a normal store (`Store(dest / DB)`,
        so `dest` serves as a `--state-dir`). Safe while an exporter writes, without its lock:
        the files are copied (logs first, then the manifest, then the tables, hard-linked where
        the file system allows), the copy opened once, which cuts its log at the last whole
        commit, and checked; durable (fsynced) when this returns. Raises FileNotFoundError when
        there is no store, FileExistsError when `dest` holds one, ValueError when the copy is
        not sound, OSError or plyvel.Error when it cannot be copied."""
        if not self.exists():
            raise FileNotFoundError(f"{self.path}: no store to back up")
        dest = Path(dest)
        target = dest / self.path.name
        if target.exists():
            raise FileExistsError(f"{target} exists")
        dest.mkdir(parents=True, exist_ok=True)
        _copy(self.path, target)
        db = _open(target)
        try:
            problems = _verify(db)
        finally:
            db.close()
        if problems:
            shutil.rmtree(target, ignore_errors=True)
            raise ValueError("; ".join(problems))
        for f in target.iterdir():
            fsync_path(f)
        fsync_path(target)
        fsync_path(dest)

    @contextlib.contextmanager
    def _reader(self) -> Iterator[plyvel.DB]:
        """The open store: this one's, or an opened copy. A copy also when no exporter holds it:
        opening a LevelDB recovers its log into a table (a write), and would hold its lock, so
        an exporter starting meanwhile could not open it; a look (`state check`, `read_state`)
        changes nothing. Where the directory cannot take a copy (read-only), the store itself."""
        if self._db is not None:
            yield self._db
            return
        try:
            tmp = tempfile.TemporaryDirectory(prefix=".copy-", dir=self.path.parent)
        except OSError:
            db = _open(self.path, create=False)
            try:
                yield db
            finally:
                db.close()
            return
        with tmp:
            copy = Path(tmp.name) / DB
            _copy(self.path, copy)
            db = _open(copy, create=False)
            try:
                yield db
            finally:
                db.close()

    def close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(Exception):
                self._db.close()
            self._db = None


def _open(path: Path, create: bool = True) -> plyvel.DB:
    return plyvel.DB(str(path), create_if_missing=create, write_buffer_size=MEMTABLE,
                     max_file_size=TABLE_FILE, compression="snappy", paranoid_checks=False,
                     lru_cache_size=BLOCK_CACHE)


def _copy(src: Path, dst: Path, attempts: int = 10) -> None:
    """A copy of a LevelDB that another process may be writing: its logs first (a commit
    appended meanwhile is cut at the last whole one when the copy opens), then CURRENT and the
    manifest it names, then the tables (immutable: hard-linked where the file system allows).
    A table removed by a compaction meanwhile makes the copy fail: it is taken again."""
    for attempt in range(attempts):
        shutil.rmtree(dst, ignore_errors=True)
        dst.mkdir(parents=True)
        try:
            for f in sorted(src.glob("*.log")):
                shutil.copyfile(f, dst / f.name)
            current = (src / "CURRENT").read_bytes()
            manifest = current.decode().strip()
            shutil.copyfile(src / manifest, dst / manifest)
            (dst / "CURRENT").write_bytes(current)
            for f in src.iterdir():
                if f.suffix in (".ldb", ".sst"):
                    try:
                        os.link(f, dst / f.name)
                    except OSError:
                        shutil.copyfile(f, dst / f.name)
            db = _open(dst, create=False)  # every table the manifest names is there
            db.close()
            return
        except (FileNotFoundError, plyvel.CorruptionError):
            if attempt == attempts - 1:
                raise


def _newest_log(path: Path) -> str | None:
    """The name of the LevelDB's newest log file (numbered: NNNNNN.log), the one written."""
    logs = [e.name for e in os.scandir(path) if e.name.endswith(".log")]
    return max(logs, key=lambda n: int(n[:-4]), default=None) if logs else None


def fsync_path(path: Path) -> None:
    """A file's or a directory's contents (entries) made durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(db: Any) -> dict[str, Any] | None:
    """Every row, assembled into the version-2 form."""
    loads, unpack, exact = orjson.loads, _unpack, _exact
    version = db.get(_VKEY)
    if version is None:
        if next(db.iterator(include_value=False), None) is not None:
            raise ValueError("a store without a format version")
        return None
    if not version.isdigit() or int(version) not in READS:
        raise ValueError(f"unsupported store version {version.decode()!r}")
    # Every block's checksum is checked as it is read: a damaged table fails the read. Each
    # row decoded inline (`row_of`): 100k of them at a restart.
    got = {kind: [exact(v) if v[0] == _JSON else unpack(v)
                  for v in db.iterator(prefix=p, include_key=False, verify_checksums=True,
                                       fill_cache=FILL_ON_READ)]
           for kind, p in _PREFIX.items()}
    meta = {k: loads(v) for k, v in got.pop("meta")}
    state = assemble(VERSION, meta, got.pop("workloads"), got.pop("units"),
                     sorted(got.pop("pending"), key=lambda r: r[1]), got.pop("series"),
                     got.pop("traces"), got.pop("spans"))
    signals = got.pop("unitsignals")
    if "unitsignals" in meta:  # else saved before the UnitSignal memory was kept
        decode = msgspec.json.decode  # a status may hold integers beyond 64 bits
        state["unitsignals"] = {**meta["unitsignals"], "objects": [
            [ns, name, decode(raw)] for ns, name, raw in sorted(signals)]}
    if any(got.values()):  # kinds assembled by their readers (Checkpointer._restore)
        state["rows"] = got
    return state


def assemble(version: int, meta: dict[str, Any], workload_rows: Iterable[Sequence[Any]],
             units: Iterable[Sequence[Any]], pending: Iterable[Sequence[Any]],
             series: list[Any], traces: Iterable[Sequence[Any]],
             spans: Iterable[Sequence[Any]]) -> dict[str, Any]:
    """The version-2 form from a store's rows (this format's and version 3's: one path for
    both): each kind's rows as its table holds them, `pending` by seq within a workload and
    `spans` by serial."""
    loads = orjson.loads
    workloads: dict[str, Any] = {}
    trace_expired: dict[str, int] = {}
    exact = msgspec.json.decode  # a cursor past the model's seqs is any integer (orjson: float)
    for name, raw in workload_rows:
        row = exact(raw)
        if "trace_expired" in row:
            trace_expired[name] = row.pop("trace_expired")
        entry: dict[str, Any] = {}
        for k in ("held", "labels"):
            if k in row:
                entry[k] = row.pop(k)
        if "next" in row:  # else a trace builder's row only
            row["units"], row["pending"] = {}, []
            entry["cursor"], entry["log"] = row["next"] - 1, row
            workloads[name] = entry
    logs = {w: e["log"] for w, e in workloads.items()}
    for w, uid, c, r, s, a, d, why, last, *ended in units:  # ended: Unit.snapshot's last two
        logs[w]["units"][uid] = [c, bool(r), bool(s), a, d, why, last, *ended]
    for w, seq, ev in pending:
        logs[w]["pending"].append([seq, None if ev is None else loads(ev)])
    state: dict[str, Any] = {
        "v": version, "workloads": workloads, "metrics": state_of_rows(series)}
    if "traces" in meta:
        builders: dict[str, Any] = {
            w: {"v": 1, "expired": n, "units": {}} for w, n in trace_expired.items()}
        for w, uid, raw in traces:
            builders[w]["units"][uid] = loads(raw)
        t = meta["traces"]
        box = [[serial, loads(raw)] for serial, raw in spans]
        outbox = None if t.get("next") is None else {"next": t["next"], "spans": box}
        state["traces"] = {"builders": builders, "outbox": outbox, "stats": t["stats"]}
    return state


def _verify(db: Any) -> list[str]:
    problems: list[str] = []
    try:
        version = db.get(_VKEY, verify_checksums=True)
        if version is None:
            if next(db.iterator(include_value=False), None) is not None:
                problems.append("rows without a format version")
        elif not version.isdigit() or int(version) not in READS:
            problems.append(f"format version {version.decode()!r}, this exporter reads "
                            f"{' and '.join(map(str, READS))}")
        for k, v in db.iterator(start=b"\x01", verify_checksums=True, fill_cache=False):
            kind = _KIND_OF.get(k[:k.index(b"\0") + 1]) if b"\0" in k else None
            if kind is None:
                problems.append(f"a row of an unknown kind: {k[:40]!r}")
                continue
            try:
                row = row_of(v)
                ok = isinstance(row, list) and _key(kind, row[:_KEYS[kind]]) == k
            except (ValueError, TypeError, AttributeError, IndexError):
                ok = False
            if not ok:
                problems.append(f"a {kind} row that does not match its key: {k[:60]!r}")
            if len(problems) > 100:
                problems.append("... (more not listed)")
                break
    except plyvel.Error as e:
        problems.append(f"{e.__class__.__name__}: {e}")
    return problems


def read_state(state_dir: str | Path) -> dict[str, Any] | None:
    """The checkpoint in `state_dir` as plain data (the version-2 form), or None: for tests
    and for an operator's look (it reads a copy: the store is left as it is)."""
    store = Store(Path(state_dir) / DB)
    if not store.exists():
        return None
    try:
        with store._reader() as db, db.snapshot() as snap:
            return _read(snap)
    finally:
        store.close()
