"""Version 3 of the checkpoint's store: one SQLite database, `state.db`, in `--state-dir`.

Read once to convert it into the log-structured store (wiring/state/store.py), then put aside; its
writer is kept for `bench.checkpoint`, which measures it beside the store that replaced it.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from exporter.wiring.state.store import Changes, assemble

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

_TABLES = ("meta", "workloads", "units", "pending", "series", "traces", "spans")
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
"""

# (statement, the Changes field whose rows it takes), in the order written: removals first,
# so a series removed and made again in one interval ends as its new row.
#
# Series and open traces have rows of a few hundred bytes: in a WITHOUT ROWID table (an index
# B-tree) a row over about a quarter of a 1 KiB page spills to an overflow page of its own, so
# they live in rowid tables (a row fits up to 989 bytes) keyed by a 63-bit hash of their key
# (`_id`; two keys of one store sharing a hash: about 1 in 10^9 at 200,000 rows).
_UNIT_COLUMNS = 9  # workload, uid and Unit.snapshot's first seven
_HASHED = frozenset({"series", "series_gone", "traces", "traces_gone"})
_WRITES = (
    ("DELETE FROM units WHERE workload = ? AND uid = ?", "units_gone"),
    ("DELETE FROM pending WHERE workload = ? AND seq = ?", "pending_gone"),
    ("DELETE FROM series WHERE id = ?", "series_gone"),
    ("DELETE FROM traces WHERE id = ?", "traces_gone"),
    ("INSERT OR REPLACE INTO workloads VALUES (?, ?)", "workloads"),
    ("INSERT OR REPLACE INTO units VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", "units"),
    ("INSERT OR REPLACE INTO pending VALUES (?, ?, ?)", "pending"),
    ("INSERT OR REPLACE INTO series VALUES (?, ?, ?, ?, ?)", "series"),
    ("INSERT OR REPLACE INTO traces VALUES (?, ?, ?, ?)", "traces"),
    ("INSERT OR REPLACE INTO spans VALUES (?, ?)", "spans"),
    ("INSERT OR REPLACE INTO meta VALUES (?, ?)", "meta"),
)


def _id(a: str, b: str | bytes) -> int:
    """A row's id in a hashed table: 63 bits of its key's BLAKE2b."""
    key = a.encode() + b"\0" + (b if isinstance(b, bytes) else b.encode())
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


def _key(row: Sequence[Any]) -> tuple[Any, Any]:
    return row[0], row[1] if len(row) > 1 else 0


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
                if rows and name == "units":  # version 3 kept no ended allocation or drain
                    rows = [r[:_UNIT_COLUMNS] for r in rows]
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
    traced = "traces" in meta
    return assemble(
        VERSION, meta, db.execute("SELECT name, state FROM workloads"),
        db.execute("SELECT * FROM units"),
        db.execute("SELECT * FROM pending ORDER BY workload, seq").fetchall(),
        db.execute("SELECT family, labels, value, hist FROM series").fetchall(),
        db.execute("SELECT workload, uid, state FROM traces").fetchall() if traced else (),
        db.execute("SELECT * FROM spans ORDER BY serial").fetchall() if traced else ())


def read_state(state_dir: str | Path) -> dict[str, Any] | None:
    """The checkpoint in `state_dir` as plain data (the version-2 form), or None: for tests
    and for an operator's look (the store is locked by no reader)."""
    store = Store(Path(state_dir) / DB)
    if not store.exists():
        return None
    try:
        return store.read()
    finally:
        store.close()
