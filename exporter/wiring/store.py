"""The checkpoint's store: one SQLite database in `--state-dir`, written in proportion to change.

A checkpoint is one transaction holding only what changed since the last one (`Changes`): the
units touched or gone, the rows of the workloads that moved (cursor, event clock, counts,
sources, reason sets), the events that entered or left the wait behind a gap, the counter and
histogram series that moved, the open traces touched, the spans held since, and the UnitSignals
whose memory (what the model measured of them) changed or that went. SQLite's
write-ahead log makes the transaction atomic and durable (`synchronous=FULL`: the log is
fsynced at each commit), so a process killed at any moment leaves the store at its last commit,
never between two of its writes. Reading it back is a few bulk SELECTs (`read`), in the form the
version-2 JSON checkpoint had, so both restore through one path.

Chosen over an append-only journal by measurement (`python -m bench.checkpoint`, 100,000 live
units over 1,000 workloads, 1,000 events between two checkpoints, medians): the store takes
26 ms a checkpoint, 7 ms of it on the event loop (taking what changed; the write runs in the
checkpointer's writer thread), and writes 3.8 MB to the disk (mean); a journal of the same rows
takes 8.5 ms and 0.36 MB; the whole-state file took 253 ms and 12.4 MB. The journal writes
fewer bytes (a B-tree rewrites each 1 KiB page holding a changed row, and copies it back from
the WAL later), but it grows until a compaction rewrites the whole state, which is the cost of
the whole-state file again (250 ms of GIL-holding serialisation at 100k units, 1.7 s with
traces, or a consistent copy of the model off the loop), a restore replays it since the last
compaction, and its torn-record recovery would be ours to get right. The store needs no
compaction, restores in one read of each table (415 ms against 769 ms for the file), and its
atomic commit is SQLite's.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import orjson

from exporter.sinks.metrics.state import state_of_rows

DB = "state.db"
# Small pages: a checkpoint rewrites each page holding a changed row, and changed units are
# spread over the whole table (bench/checkpoint.py: 1 KiB pages write about half the bytes of
# 4 KiB ones at K=1000 events, with the same time per checkpoint and restore).
PAGE_SIZE = 1024
# Pages the WAL holds before they are copied into the database: a page changed by several
# checkpoints in between is copied once (2.9 MB a checkpoint at 1,000 pages, 1.9 MB at 10,000,
# amortised over 30 checkpoints of 1,000 events at 100k units; the WAL stays under ~10 MiB).
WAL_PAGES = 10_000
# SQLite's page cache: a checkpoint's rows are spread over the whole store, and SQLite's
# default 2 MiB holds a fifth of it at 100k units (a write of 1,000 events took 31 ms; 16.5 ms
# with 16 MiB, which holds all of it without traces).
CACHE_KIB = 16_000
VERSION = 3  # the checkpoint format: 1 and 2 were checkpoint.json, converted once on load

_TABLES = ("meta", "workloads", "units", "pending", "series", "traces", "spans", "unitsignals")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS workloads(name TEXT PRIMARY KEY, state TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS units(
    workload TEXT, uid TEXT, created INTEGER, ready INTEGER, started INTEGER, alloc INTEGER,
    drain INTEGER, reason TEXT, last TEXT, PRIMARY KEY(workload, uid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending(
    workload TEXT, seq INTEGER, event TEXT, PRIMARY KEY(workload, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS series(
    id INTEGER PRIMARY KEY, family TEXT, labels TEXT, value, hist TEXT);
CREATE TABLE IF NOT EXISTS traces(
    id INTEGER PRIMARY KEY, workload TEXT, uid TEXT, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS spans(serial INTEGER PRIMARY KEY, span TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS unitsignals(
    id INTEGER PRIMARY KEY, namespace TEXT, name TEXT, memory TEXT NOT NULL);
"""

# (statement, the Changes field whose rows it takes), in the order written: removals first,
# so a series removed and made again in one interval ends as its new row.
#
# Series and open traces have rows of a few hundred bytes: in a WITHOUT ROWID table (an index
# B-tree) a row over about a quarter of a 1 KiB page spills to an overflow page of its own, so
# they live in rowid tables (a row fits up to 989 bytes) keyed by a 63-bit hash of their key
# (`_id`; two keys of one store sharing a hash: about 1 in 10^9 at 200,000 rows).
_HASHED = frozenset({"series", "series_gone", "traces", "traces_gone", "unitsignals",
                     "unitsignals_gone"})
_WRITES = (
    ("DELETE FROM workloads WHERE name = ?", "workloads_gone"),
    ("DELETE FROM units WHERE workload = ?", "workloads_gone"),
    ("DELETE FROM pending WHERE workload = ?", "workloads_gone"),
    ("DELETE FROM traces WHERE workload = ?", "workloads_gone"),
    ("DELETE FROM units WHERE workload = ? AND uid = ?", "units_gone"),
    ("DELETE FROM pending WHERE workload = ? AND seq = ?", "pending_gone"),
    ("DELETE FROM series WHERE id = ?", "series_gone"),
    ("DELETE FROM traces WHERE id = ?", "traces_gone"),
    ("DELETE FROM unitsignals WHERE id = ?", "unitsignals_gone"),
    ("INSERT OR REPLACE INTO workloads VALUES (?, ?)", "workloads"),
    ("INSERT OR REPLACE INTO units VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", "units"),
    ("INSERT OR REPLACE INTO pending VALUES (?, ?, ?)", "pending"),
    ("INSERT OR REPLACE INTO series VALUES (?, ?, ?, ?, ?)", "series"),
    ("INSERT OR REPLACE INTO traces VALUES (?, ?, ?, ?)", "traces"),
    ("INSERT OR REPLACE INTO spans VALUES (?, ?)", "spans"),
    ("INSERT OR REPLACE INTO unitsignals VALUES (?, ?, ?, ?)", "unitsignals"),
    ("INSERT OR REPLACE INTO meta VALUES (?, ?)", "meta"),
)

_FIELDS = tuple(dict.fromkeys(f for _, f in _WRITES))


@dataclass
class Changes:
    """The rows of one checkpoint. `full`: the store is replaced (a first save, a conversion)."""

    full: bool = False
    # Workloads dropped (another shard's, or gone from the route): every row of theirs goes
    # (its own, its units, its waiting events, its open traces); their series go as
    # `series_gone`. Removed before anything is written, so one made again is written anew.
    workloads_gone: list[tuple[str]] = field(default_factory=list)
    workloads: list[tuple[str, str]] = field(default_factory=list)
    units: list[tuple[Any, ...]] = field(default_factory=list)
    units_gone: list[tuple[str, str]] = field(default_factory=list)
    pending: list[tuple[str, int, str | None]] = field(default_factory=list)
    pending_gone: list[tuple[str, int]] = field(default_factory=list)
    series: list[tuple[str, str, float | None, str | None]] = field(default_factory=list)
    series_gone: list[tuple[str, str]] = field(default_factory=list)
    traces: list[tuple[str, str, str]] = field(default_factory=list)
    traces_gone: list[tuple[str, str]] = field(default_factory=list)
    spans: list[tuple[int, str]] = field(default_factory=list)
    spans_through: int = 0  # stored spans up to this serial are handled: they go
    held_through: int = 0  # the spans held up to this serial are in `spans`: once durable,
    # they may leave (Outbox.saved)
    meta: list[tuple[str, str]] = field(default_factory=list)
    # The UnitSignal model's memory (model.unitsignals `memory`): (namespace, name, record as
    # JSON) of the objects touched, (namespace, name) of those gone.
    unitsignals: list[tuple[str, str, str]] = field(default_factory=list)
    unitsignals_gone: list[tuple[str, str]] = field(default_factory=list)

    def rows(self) -> int:
        """Rows written or removed (a dropped workload counts once)."""
        return sum(len(getattr(self, f)) for f in _FIELDS)

    def size(self) -> int:
        """Bytes of the rows written: their text and blob fields, 8 per number."""
        return sum(_size(r) for f in _FIELDS for r in getattr(self, f))


def _id(a: str, b: str | bytes) -> int:
    """A row's id in a hashed table: 63 bits of its key's BLAKE2b."""
    key = a.encode() + b"\0" + (b if isinstance(b, bytes) else b.encode())
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


def _key(row: Sequence[Any]) -> tuple[Any, Any]:
    return row[0], row[1] if len(row) > 1 else 0


def _size(row: Sequence[Any]) -> int:
    return sum(len(v) if isinstance(v, str | bytes) else 8 for v in row)


class Store:
    """The database, opened on first use; used by one thread at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self.spans_through = 0  # the last `spans_through` applied
        self.broken = False  # the last write failed

    def exists(self) -> bool:
        return self.path.exists()

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            # Written from the checkpointer's writer thread, read at start: one at a time.
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            try:
                db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # before the first table only
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")
                db.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
                db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
                db.execute("PRAGMA temp_store=MEMORY")  # no temp files: the root is read-only
                db.executescript(_SCHEMA)
            except sqlite3.Error:
                db.close()
                raise
            self._db = db
        return self._db

    def check(self) -> None:
        """Raises when the last write failed: what was taken since is not all stored."""
        if self.broken:
            raise sqlite3.OperationalError("an earlier checkpoint was not written")

    def write(self, changes: Changes) -> None:
        """One transaction: all of `changes`, or (killed, or failing) none of them. After a
        failure only a whole write (`full`) is taken: the changes of the writes between would
        miss the failed one's."""
        if not changes.full:
            self.check()
        self.broken = True
        db = self._open()
        db.execute("BEGIN IMMEDIATE")
        try:
            if changes.full:
                for t in _TABLES:
                    self._run(f"DELETE FROM {t}", [()])
                self._run("INSERT INTO meta VALUES ('v', ?)", [(str(VERSION),)])
            for sql, name in _WRITES:
                rows = getattr(changes, name)
                if rows and name in _HASHED:
                    rows = [(_id(r[0], r[1]), *r[2:]) if name.endswith("_gone")
                            else (_id(r[0], r[1]), *r) for r in rows]
                if rows:
                    if changes.full:  # in key order: appended to each table's B-tree
                        rows.sort(key=_key)
                    self._run(sql, rows)
            if changes.spans_through > self.spans_through:
                self._run("DELETE FROM spans WHERE serial <= ?", [(changes.spans_through,)])
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        self.spans_through = max(self.spans_through, changes.spans_through)
        self.broken = False

    def _run(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """One statement over its rows (a test kills the process between two of these)."""
        assert self._db is not None
        self._db.executemany(sql, rows)

    def read(self) -> dict[str, Any] | None:
        """The stored state in the version-2 checkpoint's form (with "v": 3); None when the
        store holds no checkpoint (never committed one)."""
        db = self._open()
        db.execute("BEGIN")  # one snapshot of the store for every SELECT
        try:
            return _read(db)
        finally:
            db.execute("COMMIT")

    def verify(self, *, decode: bool = True) -> list[str]:
        """The store's integrity problems, one line each; empty: sound.

        Reads everything the store holds, on a connection of its own that writes nothing (safe
        while an exporter writes the store, and without its lock): the engine's own check of
        its files (SQLite: `PRAGMA integrity_check`: every page, every row, every key in
        order), the format version (a store of another version is a problem; one that never
        committed a checkpoint is sound and empty), and that `read()` decodes every row of the
        last committed checkpoint. `decode=False` leaves that last part out, for a start that
        decodes the store itself next (Checkpointer.load). A store that is absent is sound (no
        checkpoint). Never raises for what it finds in the files; a file it cannot open is a
        problem too."""
        if not self.exists():
            return []
        try:
            db = self._open_read_only()
        except sqlite3.Error as e:
            return [f"{self.path}: cannot be opened: {e}"]
        try:
            problems = [f"{self.path}: {row[0]}" for row in
                        db.execute("PRAGMA integrity_check(100)") if row[0] != "ok"]
            if problems or not _has_meta(db):  # else: no table yet, no checkpoint
                return problems
            version = db.execute("SELECT value FROM meta WHERE key = 'v'").fetchone()
            if version is not None and version[0] != str(VERSION):
                return [f"{self.path}: format version {version[0]}, this exporter reads "
                        f"{VERSION}"]
            if not decode:
                return []
            db.execute("BEGIN")
            try:
                _read(db)
            finally:
                db.execute("COMMIT")
            return []
        except sqlite3.Error as e:
            return [f"{self.path}: {e}"]
        except (ValueError, TypeError, KeyError, AttributeError) as e:  # rows that decode not
            return [f"{self.path}: undecodable checkpoint ({e.__class__.__name__}: {e})"]
        finally:
            db.close()

    def backup(self, dest: Path) -> None:
        """A consistent copy of the last committed checkpoint into the directory `dest` (made
        if absent; it must hold no store), which opens as a normal store (`Store(dest / DB)`).

        Safe while an exporter writes the store, and without its lock: the copy is one
        snapshot (a commit under way is either wholly in it or not at all) and the writer is
        never blocked for longer than the engine's own reads block it (SQLite: the online
        backup API in one step, on a read-only connection; the WAL lets the writer go on).
        The copy is durable (fsynced, with its directory) when this returns. Raises
        FileNotFoundError when there is no store to copy, FileExistsError when `dest` holds
        one, sqlite3.Error or OSError when it cannot be copied."""
        if not self.exists():
            raise FileNotFoundError(f"{self.path}: no store to back up")
        target = Path(dest) / self.path.name
        if target.exists():
            raise FileExistsError(f"{target} exists")
        Path(dest).mkdir(parents=True, exist_ok=True)
        src = self._open_read_only()
        try:
            out = sqlite3.connect(target, isolation_level=None)
            try:
                src.backup(out)  # every page at once: one snapshot of the last commit
                # One file, no -wal beside it: copied again as it is, it is still whole. The
                # store's connection turns the WAL on again when it first opens it.
                out.execute("PRAGMA journal_mode=DELETE")
            finally:
                out.close()
        finally:
            src.close()
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fd = os.open(dest, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _open_read_only(self) -> sqlite3.Connection:
        """A connection that writes nothing to the store (it may make the WAL's index file
        when no exporter has it open), for `verify` and `backup`."""
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, isolation_level=None,
                             check_same_thread=False)
        try:
            db.execute("PRAGMA temp_store=MEMORY")
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a bad header fails
        except sqlite3.Error:
            db.close()
            raise
        return db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _read(db: sqlite3.Connection) -> dict[str, Any] | None:
    loads = orjson.loads
    meta = {k: loads(v) for k, v in db.execute("SELECT key, value FROM meta")}
    if meta.get("v") != VERSION:
        if "v" in meta:
            raise ValueError(f"unsupported store version {meta['v']!r}")
        return None
    workloads: dict[str, Any] = {}
    trace_expired: dict[str, int] = {}
    for name, raw in db.execute("SELECT name, state FROM workloads"):
        row = loads(raw)
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
    for w, uid, c, r, s, a, d, why, last in db.execute("SELECT * FROM units"):
        logs[w]["units"][uid] = [c, bool(r), bool(s), a, d, why, last]
    for w, seq, ev in db.execute("SELECT * FROM pending ORDER BY workload, seq"):
        logs[w]["pending"].append([seq, None if ev is None else loads(ev)])
    state: dict[str, Any] = {
        "v": VERSION, "workloads": workloads,
        "metrics": state_of_rows(
            db.execute("SELECT family, labels, value, hist FROM series").fetchall())}
    if "traces" in meta:
        builders: dict[str, Any] = {
            w: {"v": 1, "expired": n, "units": {}} for w, n in trace_expired.items()}
        for w, uid, raw in db.execute("SELECT workload, uid, state FROM traces"):
            builders[w]["units"][uid] = loads(raw)
        t = meta["traces"]
        spans = [[serial, loads(raw)] for serial, raw in
                 db.execute("SELECT * FROM spans ORDER BY serial")]
        outbox = None if t.get("next") is None else {"next": t["next"], "spans": spans}
        state["traces"] = {"builders": builders, "outbox": outbox, "stats": t["stats"]}
    if "unitsignals" in meta:  # else saved before the UnitSignal memory was kept
        decode = msgspec.json.decode  # a status may hold integers beyond 64 bits
        state["unitsignals"] = {**meta["unitsignals"], "objects": [
            [ns, name, decode(raw)] for ns, name, raw in db.execute(
                "SELECT namespace, name, memory FROM unitsignals ORDER BY namespace, name")]}
    return state


def _has_meta(db: sqlite3.Connection) -> bool:
    return db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone() is not None


def read_state(state_dir: str | Path) -> dict[str, Any] | None:
    """The checkpoint in `state_dir` as plain data (the version-2 form), or None: for tests
    and for an operator's look (`state check`). Writes nothing (the store is locked by no
    reader, and a copy being checked stays as it is)."""
    store = Store(Path(state_dir) / DB)
    if not store.exists():
        return None
    db = store._open_read_only()
    try:
        if not _has_meta(db):
            return None
        db.execute("BEGIN")  # one snapshot of the store for every SELECT
        try:
            return _read(db)
        finally:
            db.execute("COMMIT")
    finally:
        db.close()
