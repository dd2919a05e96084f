"""Start-time rows (sinks/metrics/otlp/starts.py) never outlive their series: neither a family
whose label set changed nor a series removed while running leaves a row behind in the store."""

from __future__ import annotations

from pathlib import Path

import orjson

from exporter.wiring.events import Pipeline
from exporter.wiring.state.checkpoint import Checkpointer
from exporter.wiring.state.store import DB, Changes, Store, row_of
from tests.test_checkpoint import LOGS, _fed

OLD_KEY = ("zaroz_events_duplicate_total", orjson.dumps(["wl-1"]).decode())


def stored_starts(state_dir: Path) -> set[tuple[str, str]]:
    store = Store(state_dir / DB)
    db = store._open()
    try:
        return {tuple(row_of(v)[:2]) for _, v in db.iterator(prefix=b"starts\0")}
    finally:
        store.close()


def with_an_old_label_set(state_dir: Path) -> None:
    """The store as one from before zaroz_events_duplicate_total had its `source` label: a
    series row of the old shape, with its start time."""
    store = Store(state_dir / DB)
    db = store._open()
    with db.write_batch(sync=True) as batch:
        for prefix in (b"series\0", b"starts\0"):
            for k, v in db.iterator(prefix=prefix):
                if row_of(v)[0] == OLD_KEY[0]:
                    batch.delete(k)
    store.write(Changes(series=[(*OLD_KEY, 7, None)], starts=[(*OLD_KEY, 1_000)]))
    store.close()


def test_the_start_of_a_family_whose_labels_changed_is_removed(tmp_path: Path):
    p = _fed(300)
    cp = Checkpointer(tmp_path, p)
    cp.save()
    cp.close()
    with_an_old_label_set(tmp_path)
    assert OLD_KEY in stored_starts(tmp_path)
    q = Pipeline()
    loaded = Checkpointer(tmp_path, q)
    loaded.load()
    assert OLD_KEY not in loaded.starts.known
    loaded.save()
    loaded.close()
    rows = stored_starts(tmp_path)
    assert OLD_KEY not in rows
    # What is left is exactly the series stored: one start row each.
    store = Store(tmp_path / DB)
    db = store._open()
    series = {tuple(row_of(v)[:2]) for _, v in db.iterator(prefix=b"series\0")}
    store.close()
    assert rows == series



def stored_series(state_dir: Path) -> set[tuple[str, str]]:
    store = Store(state_dir / DB)
    db = store._open()
    try:
        return {tuple(row_of(v)[:2]) for _, v in db.iterator(prefix=b"series\0")}
    finally:
        store.close()


def test_the_starts_of_series_removed_at_run_time_are_removed(tmp_path: Path):
    """A workload dropped while running takes its series' start rows with it, and one seen
    again later starts its series with new start times (a series that restarts)."""
    p = _fed(300)
    cp = Checkpointer(tmp_path, p)
    cp.save()
    before = dict(cp.starts.known)
    assert sum(name.startswith("zaroz_unit") for name, _ in before) > 5
    p.drop(["wl-1"], "test")
    cp.save()
    assert not any('"wl-1"' in key for _, key in cp.starts.known)
    cp.close()
    assert stored_starts(tmp_path) == stored_series(tmp_path)
    assert not any('"wl-1"' in key for _, key in stored_starts(tmp_path))
    q = Pipeline()
    again = Checkpointer(tmp_path, q)
    again.load()
    for e in LOGS["wl-1"][:300]:
        q.workload("wl-1").offer(e)
    again.save()
    again.close()
    assert stored_starts(tmp_path) == stored_series(tmp_path)
    renewed = {k: v for k, v in again.starts.known.items() if k in before}
    assert renewed and all(v > before[k] for k, v in renewed.items())
