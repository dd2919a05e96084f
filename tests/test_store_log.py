"""The store as a log: a torn or corrupt tail is cut at the last whole commit, a version-3
SQLite store converts once, a version-4 store (JSON rows) is read as it is, the files stay
bounded, and `verify` and `backup` work beside a writer."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import plyvel
import pytest

from exporter.wiring.events import Pipeline
from exporter.wiring.state import convert
from exporter.wiring.state.checkpoint import Checkpointer
from exporter.wiring.state.store import DB, VERSION, Changes, Store, read_state, row_of
from exporter.wiring.state.store import _dumps as store_row
from tests.test_state_store import LOGS, _close, _pipeline, _rich, _same


def _live_log(store: Path) -> Path:
    return max(store.glob("*.log"), key=lambda f: int(f.stem))


def _commits(tmp_path: Path, n: int) -> tuple[Checkpointer, list[dict[str, Any]], list[int]]:
    """n checkpoints of a growing log: the state after each, and the log's size after each."""
    p = _pipeline(traces=False)
    cp = Checkpointer(tmp_path, p)
    feed = iter(LOGS["wl-1"])
    states, sizes = [], []
    for _ in range(n):
        for e in itertools.islice(feed, 20):
            p.workload("wl-1").offer(e)
        assert cp.save() is True
        states.append(cp.state())
        sizes.append(_live_log(tmp_path / DB).stat().st_size)
    return cp, states, sizes


@pytest.mark.parametrize("cut", ["torn", "corrupt", "garbage after"])
def test_a_torn_or_corrupt_tail_is_cut_at_the_last_whole_commit(tmp_path: Path, cut: str):
    cp, states, sizes = _commits(tmp_path, 6)
    cp.close()
    log = _live_log(tmp_path / DB)
    assert sizes[-2] < sizes[-1] == log.stat().st_size  # the last commits are in the log
    if cut == "torn":
        with open(log, "r+b") as f:
            f.truncate(sizes[-2] + (sizes[-1] - sizes[-2]) // 2)
        expected = states[-2]
    elif cut == "corrupt":
        with open(log, "r+b") as f:
            f.seek(sizes[-2] + (sizes[-1] - sizes[-2]) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        expected = states[-2]
    else:  # the start of a commit that never finished
        with open(log, "ab") as f:
            f.write(b"\x12\x34\x56\x78\x00\x10\x01partial")
        expected = states[-1]
    _same(read_state(tmp_path), expected)  # every whole commit, nothing after the cut
    q = Pipeline()
    again = Checkpointer(tmp_path, q)
    assert again.load() == 1
    _same(again.state(), expected)
    again.close()


def test_a_version_3_store_is_converted_once_with_every_value(tmp_path: Path):
    p = _pipeline()
    old = Checkpointer(tmp_path / "old", p)
    _rich(p)
    ch = old.changes()  # the whole state, as version 3 stored it:
    # its unit rows end at the last event's time (version 3's writer drops the ended
    # allocation's and drain's span starts, which came after it), so neither the store nor the
    # state after conversion has them
    state = old.state()
    for log in state["workloads"].values():
        units = log["log"].get("units", {})
        for uid, unit in units.items():
            units[uid] = unit[:7]
    old.close()
    v3 = convert.Store(tmp_path / convert.DB)
    v3.write(ch)
    v3.close()
    as_v3 = convert.read_state(tmp_path)  # version 3's own reader
    assert as_v3 is not None and as_v3["v"] == 3
    state["traces"]["stats"] = as_v3["traces"]["stats"]  # as that save froze them
    resent = len(as_v3["traces"]["outbox"]["spans"])
    # Sent again at the load (counted as re-sent, not as new spans):
    state["traces"]["stats"]["resent"] = state["traces"]["stats"].get("resent", 0) + resent
    q = _pipeline()
    cp = Checkpointer(tmp_path, q)
    assert cp.load() == 2
    assert not (tmp_path / convert.DB).exists()
    assert (tmp_path / (convert.DB + ".converted")).exists()  # kept, read by nothing
    stored = read_state(tmp_path)
    assert stored is not None and stored["v"] == VERSION
    _same({**stored, "v": 3}, {**state, "v": 3})
    cp.close()
    r = _pipeline()
    later = Checkpointer(tmp_path, r)
    assert later.load() == 2  # from the store, the old file not read again
    r.registry.hold(later.held_at_save)
    state["traces"]["stats"]["resent"] += resent  # and again
    _same({**later.state(), "v": 3}, {**state, "v": 3})
    for c in (later, cp, old):
        _close(c)


def test_the_store_files_stay_bounded_over_a_long_stream(tmp_path: Path, monkeypatch):
    """Many memtables' worth of checkpoints: LevelDB folds its log into tables and removes
    what it no longer needs; the directory stays within a few times the state."""
    monkeypatch.setattr("exporter.wiring.state.store.MEMTABLE", 64 << 10)
    monkeypatch.setattr("exporter.wiring.state.store.TABLE_FILE", 64 << 10)
    store = Store(tmp_path / DB)
    rows = 2000
    for i in range(300):
        store.write(Changes(full=i == 0, units=[
            ("wl", f"u{(i * 97 + k) % rows}", i, 1, 1, 0, 0, None, "x" * 100)
            for k in range(200)]))
    size = sum(f.stat().st_size for f in (tmp_path / DB).iterdir())
    files = list((tmp_path / DB).iterdir())
    store.close()
    state_bytes = rows * 160
    assert size < 3 * state_bytes + (64 << 10), (size, state_bytes, sorted(f.name for f in files))
    assert len(files) < 40


def test_verify_and_backup_beside_a_running_writer(tmp_path: Path):
    cp, states, _ = _commits(tmp_path / "state", 4)  # open and locked, as serve holds it
    other = Store(tmp_path / "state" / DB)  # another process's view: the CLI's
    assert other.verify() == []
    other.backup(tmp_path / "backup")
    _same(read_state(tmp_path / "backup"), states[-1])
    with pytest.raises(FileExistsError):
        other.backup(tmp_path / "backup")
    assert Store(tmp_path / "none" / DB).verify() == []  # no store: sound, no checkpoint
    with pytest.raises(FileNotFoundError):
        Store(tmp_path / "none" / DB).backup(tmp_path / "backup2")
    q = Pipeline()  # a new pod from the backup continues from it
    restored = Checkpointer(tmp_path / "backup", q)
    assert restored.load() == 1
    _same(restored.state(), states[-1])
    restored.close()
    cp.close()
    table = max((tmp_path / "state" / DB).glob("*.ldb"), default=None)
    if table is None:  # everything still in the log: make a table
        s = Store(tmp_path / "state" / DB)
        s._open().compact_range()
        s.close()
        table = max((tmp_path / "state" / DB).glob("*.ldb"))
    data = bytearray(table.read_bytes())
    data[len(data) // 3] ^= 0xFF
    table.write_bytes(bytes(data))
    problems = Store(tmp_path / "state" / DB).verify()
    assert problems and any("orrupt" in p or "checksum" in p for p in problems), problems


def test_a_commit_into_a_new_log_file_fsyncs_the_directory(tmp_path: Path, monkeypatch):
    """LevelDB fsyncs the directory for its manifest only: a log made at a memtable switch
    has its directory entry fsynced by the store after the commit that went into it."""
    from exporter.wiring.state import store as store_mod

    monkeypatch.setattr(store_mod, "MEMTABLE", 64 << 10)
    synced: list[tuple[Path, str | None]] = []
    real = store_mod.fsync_path
    store = Store(tmp_path / DB)

    def recording(path: Path) -> None:
        synced.append((Path(path), _live_log(tmp_path / DB).name))
        real(path)

    monkeypatch.setattr(store_mod, "fsync_path", recording)
    logs: list[str] = []
    for i in range(40):
        store.write(Changes(full=i == 0, units=[
            ("wl", f"u{k}", i, 1, 1, 0, 0, None, "x" * 100) for k in range(200)]))
        live = _live_log(tmp_path / DB).name
        if logs and live != logs[-1]:  # (the first: made at the open, with its manifest)
            assert (tmp_path / DB, live) in synced  # before the commit returned
        if not logs or live != logs[-1]:
            logs.append(live)
    store.close()
    assert len(logs) >= 3  # several switches


def _stored(store: Path) -> dict[bytes, bytes]:
    db = plyvel.DB(str(store))
    try:
        return dict(db.iterator())
    finally:
        db.close()


def _as_version_4(store: Path) -> None:
    """The store as version 4 wrote it: every row as JSON (orjson's, or the standard library's
    for an integer beyond 64 bits), its version 4."""
    db = plyvel.DB(str(store))
    try:
        with db.write_batch(sync=True) as batch:
            for k, v in db.iterator():
                batch.put(k, b"4" if k == b"\0v" else
                          json.dumps(row_of(v), separators=(",", ":")).encode())
    finally:
        db.close()


def test_a_version_4_store_is_read_as_it_is_and_is_version_5_from_its_next_commit(
        tmp_path: Path):
    p = _pipeline(traces=False)
    _rich(p)
    cp = Checkpointer(tmp_path, p)
    assert cp.save() is True
    cp.close()
    written = _stored(tmp_path / DB)
    assert written[b"\0v"] == str(VERSION).encode() == b"5"
    rows = [v for k, v in written.items() if k != b"\0v"]
    assert rows and not any(v.startswith(b"[") for v in rows)  # MessagePack, every one
    json_bytes = sum(len(json.dumps(row_of(v), separators=(",", ":"))) for v in rows)
    assert sum(map(len, rows)) < 0.9 * json_bytes

    _as_version_4(tmp_path / DB)
    old = _stored(tmp_path / DB)
    expected = read_state(tmp_path)
    assert old[b"\0v"] == b"4" and all(v.startswith(b"[") for k, v in old.items() if k != b"\0v")
    q = Pipeline()
    again = Checkpointer(tmp_path, q)
    assert again.load() == 2
    q.registry.hold(again.held_at_save)  # as serve does
    _same(again.state(), expected)
    for e in LOGS["wl-1"][200:230]:  # wl-1's next events: its rows change, wl-rich's do not
        q.workload("wl-1").offer(e)
    assert again.save() is True
    after = again.state()
    again.close()
    mixed = _stored(tmp_path / DB)
    assert mixed[b"\0v"] == b"5"
    changed = [k for k, v in mixed.items() if k != b"\0v" and v != old.get(k)]
    kept = [k for k, v in mixed.items() if k != b"\0v" and v == old.get(k)]
    assert changed and kept and not any(mixed[k].startswith(b"[") for k in changed)
    assert all(mixed[k].startswith(b"[") for k in kept)  # still version 4's JSON, read so
    _same(read_state(tmp_path), after)
    assert Store(tmp_path / DB).verify() == []


def test_a_row_with_an_integer_beyond_64_bits_is_stored_as_json_and_read_exactly(
        tmp_path: Path):
    big = [2**64 + 1, -(2**63) - 1]
    for row in (["wl-1", "u-1", big[0]], ["wl-1", "u-1", big[1]], ["wl-1", "u-1", 2**64 - 1]):
        value = store_row(row)
        assert value.startswith(b"[") == (row[2] in big)  # JSON only when MessagePack can't
        assert row_of(value) == row and type(row_of(value)[2]) is int
