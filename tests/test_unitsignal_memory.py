"""The UnitSignal model's memory as the checkpoint keeps it: a model restored from another's
memory goes on exactly as the other would (the same observations, the same states), the rows
taken incrementally (`touched`) always equal the whole memory, objects this exporter no longer
watches are dropped at restore, and a checkpoint saved without the memory still loads."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.model.observations import Recorder
from exporter.model.signal import UnitSignal
from exporter.model.unitsignals import UnitSignalModel
from exporter.sinks.metrics.family import Registry
from exporter.sources.kube.typed import decode_event
from exporter.wiring.events import Pipeline
from exporter.wiring.state import checkpoint
from exporter.wiring.state.checkpoint import Checkpointer
from exporter.wiring.state.store import DB, Store, read_state
from exporter.wiring.state.store import _key as store_key
from exporter.wiring.unitsignals import SignalMemory, build_cluster
from tests.unitsignals import T0, iso, status, unitsignal

NAMES = ("u0", "u1", "u2")

step = st.fixed_dictionaries({
    "name": st.sampled_from(NAMES),
    "dt": st.floats(0, 30),
    "delete": st.sampled_from([False] * 7 + [True]),
    "generation": st.integers(1, 4),
    "observed": st.one_of(st.none(), st.integers(0, 5)),
    "ready": st.sampled_from([None, T0 - 5, T0 + 3]),
    "alloc": st.sampled_from([None, "a-1", "a-2"]),
    "allocated_at": st.sampled_from([None, T0 + 1]),
    "ack": st.sampled_from([None, "a-1", "a-2", "zz"]),
    "seq": st.one_of(st.none(), st.integers(0, 4), st.just(2**70)),
    "workload": st.sampled_from(["wl-1", "wl-2", None]),
    "uid": st.sampled_from(["x", "y"]),
    "draining": st.sampled_from([False, "scale_down", "bogus"]),
    "activity": st.sampled_from([None, "idle", "busy"]),
})


def _obj(s: dict[str, Any]) -> dict[str, Any]:
    alloc = None if s["alloc"] is None else {
        "id": s["alloc"], **({} if s["allocated_at"] is None else
                              {"allocatedAt": iso(s["allocated_at"])})}
    st_ = status(observedGeneration=s["observed"], seq=s["seq"], allocationAck=s["ack"],
                 activity=s["activity"],
                 signalledReady=None if s["ready"] is None else iso(s["ready"]))
    return unitsignal(s["name"], generation=s["generation"], workload=s["workload"],
                      uid=f"uid-{s['name']}-{s['uid']}", spec_written=T0 - 20,
                      status_=st_, allocation=alloc, draining=s["draining"])


def _typed(obj: dict[str, Any]) -> UnitSignal:
    """As the typed watch decodes it (a status may hold integers beyond 64 bits)."""
    ev = decode_event(msgspec.json.encode({"type": "MODIFIED", "object": obj}))
    assert ev is not None and type(ev[1]) is UnitSignal
    return ev[1]


def _apply(model: UnitSignalModel, steps: list[dict[str, Any]], now: float,
           typed: bool = False) -> float:
    for s in steps:
        now += s["dt"]
        obj: Any = _typed(_obj(s)) if typed else _obj(s)
        if s["delete"]:
            model.delete(obj, now)
        else:
            model.upsert(obj, now)
    return now


def _round_trip(records: list[tuple[Any, list[Any]]]) -> list[tuple[Any, list[Any]]]:
    """Through the store's encoding (integers of any size)."""
    raw = msgspec.json.encode([[list(k), r] for k, r in records])
    return [(tuple(k), r) for k, r in msgspec.json.decode(raw)]


def _members(m: UnitSignalModel) -> dict[tuple[str, str], dict[Any, float]]:
    """The phase index without the workloads left empty (a restart forgets those)."""
    return {(w, ph): keys for w, by in m.phases.items() for ph, keys in by.items() if keys}


def _model() -> tuple[UnitSignalModel, Recorder]:
    rec = Recorder()
    return UnitSignalModel(rec, ["team"]), rec


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, max_size=25), st.lists(step, max_size=25), st.booleans())
def test_a_restored_model_goes_on_as_the_original(before, after, typed):
    """`typed`: the restored model is then fed typed objects (as the watch decodes them), the
    original plain ones: the model promises the same result either way."""
    a, _ = _model()
    now = _apply(a, before, T0)
    b, rec_b = _model()
    assert b.restore(_round_trip(a.memory())) == []
    # the restore shows each object's state as it was, and measures nothing
    assert sorted(c[1] for c in rec_b.calls) == sorted(a.objects)
    assert {c[0] for c in rec_b.calls} <= {"state"}
    assert [(k, s.state) for k, s in b.objects.items()] == [
        (k, s.state) for k, s in a.objects.items()]
    assert _members(b) == _members(a)
    rec_a = Recorder()
    a.obs = rec_a
    rec_b.calls.clear()
    _apply(a, after, now)
    _apply(b, after, now, typed)
    assert rec_b.calls == rec_a.calls
    assert b.memory() == a.memory()


@settings(max_examples=150, deadline=None)
@given(st.lists(step, max_size=40))
def test_rows_taken_as_they_change_equal_the_whole_memory(steps):
    model, _ = _model()
    model.track()
    stored: dict[Any, list[Any]] = {}
    now = T0
    for s in steps:
        now = _apply(model, [s], now)
        for key, rec in model.take_memory():
            if rec is None:
                stored.pop(key, None)
            else:
                stored[key] = rec
        assert stored == dict(model.memory())
    # a relist of the same objects changes nothing: nothing to write
    for name in NAMES:
        key = ("team-a", name)
        if key in model.objects:
            model.upsert(_last(steps, name), now)
    assert model.take_memory() == []


def _last(steps: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return _obj([s for s in steps if s["name"] == name][-1])


def test_restore_keeps_only_the_objects_watched():
    a, _ = _model()
    for ns, name, wl in (("ns-a", "x", "mine"), ("ns-a", "y", "theirs"), ("ns-b", "z", "mine")):
        a.upsert(unitsignal(name, ns, workload=wl, status_=status()), T0)
    stored = {"v": 1, "objects": [[k[0], k[1], r] for k, r in _round_trip(a.memory())]}
    stored["objects"].append(["ns-a", "w", ["not", "a", "record"]])
    bogus = copy.deepcopy(stored["objects"][0][2])
    bogus[-1][-2] = "no-such-phase"  # the sink would fail to render it: not restored
    stored["objects"].append(["ns-a", "v", bogus])
    b, _ = _model()
    memory = SignalMemory(b, owns=lambda w: w == "mine", namespaces=["ns-a"])
    b.track()
    assert memory.restore(stored) == 1
    assert list(b.objects) == [("ns-a", "x")]
    memory.taken()
    rows, gone = memory.take()
    assert rows == [] and sorted(gone) == [
        ("ns-a", "v"), ("ns-a", "w"), ("ns-a", "y"), ("ns-b", "z")]
    assert memory.take() == ([], [])


def _objects(n: int, seq: int = 1) -> list[dict[str, Any]]:
    return [unitsignal(f"u{i}", status_=status(signalledReady=iso(T0 + 2), seq=seq))
            for i in range(n)]


def _cluster(state_dir: Path) -> tuple[Checkpointer, UnitSignalModel, Registry]:
    p = Pipeline()
    model, _ = build_cluster(p.registry)
    return Checkpointer(state_dir, p, signals=SignalMemory(model)), model, p.registry


def _ready_count(registry: Registry) -> int:
    return sum(s.count for s in registry["zaroz_unitsignal_ready_seconds"].series.values())


def test_the_memory_is_saved_and_restored_with_the_counters(tmp_path: Path):
    cp, model, reg = _cluster(tmp_path)
    cp.load()
    model.replace(_objects(5), T0)
    cp.save()
    assert _ready_count(reg) == 5
    stored = read_state(tmp_path)
    assert stored is not None and stored["unitsignals"] == cp.state()["unitsignals"]
    model.replace(_objects(4, seq=2), T0 + 1)  # one deleted, the others' seq moved
    cp.save()
    assert cp.last_rows >= 5
    assert read_state(tmp_path)["unitsignals"] == cp.state()["unitsignals"]  # type: ignore
    cp.close()

    cp, model, reg = _cluster(tmp_path)
    cp.load()
    assert len(model.objects) == 4 and _ready_count(reg) == 5
    model.replace(_objects(4, seq=2), T0 + 60)  # the relist after the restart
    assert _ready_count(reg) == 5
    assert not cp.save() or cp.last_rows == 0
    cp.close()


def test_a_checkpoint_saved_without_the_memory_still_loads(tmp_path: Path, caplog):
    cp, model, reg = _cluster(tmp_path)
    cp.load()
    model.replace(_objects(3), T0)
    cp.save()
    cp.close()
    # As a checkpoint without the memory (a version before it was kept, converted) holds it:
    store = Store(tmp_path / DB)
    db = store._open()
    with db.write_batch(sync=True) as batch:
        for k in db.iterator(prefix=b"unitsignals\0", include_value=False):
            batch.delete(k)
        batch.delete(store_key("meta", ("unitsignals",)))
    store.close()
    assert "unitsignals" not in (read_state(tmp_path) or {})

    cp, model, reg = _cluster(tmp_path)
    with caplog.at_level(logging.WARNING):
        cp.load()
    assert any("measures every UnitSignal once more" in r.message for r in caplog.records)
    assert _ready_count(reg) == 3 and not model.objects
    model.replace(_objects(3), T0 + 60)
    assert _ready_count(reg) == 6  # once more, at that first list only
    cp.save()
    cp.close()

    cp, model, reg = _cluster(tmp_path)
    cp.load()
    model.replace(_objects(3), T0 + 120)
    assert _ready_count(reg) == 6
    cp.close()


@pytest.mark.parametrize("watched", [True, False])
def test_rows_of_a_checkpoint_without_the_watch_are_dropped_once(tmp_path: Path, watched):
    cp, model, _ = _cluster(tmp_path)
    cp.load()
    model.replace(_objects(2), T0)
    cp.save()
    cp.close()
    p = Pipeline()
    if watched:
        cp, model, _ = _cluster(tmp_path)
    else:  # UnitSignals no longer watched: the next save leaves no memory behind
        cp = Checkpointer(tmp_path, p)
    cp.load()
    cp.save()
    cp.close()
    stored = read_state(tmp_path)
    assert stored is not None
    assert ("unitsignals" in stored) is watched
    if watched:
        assert len(stored["unitsignals"]["objects"]) == 2


def test_a_first_save_takes_the_memory_in_slices_and_stores_it_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fresh process's first save takes every object's row ahead, in slices between turns of
    the loop; objects that change between slices are taken again, and the save that completes
    it stores every object's memory as it is at that save."""
    monkeypatch.setattr(checkpoint, "SLICE_ROWS", 10)
    cp, model, _ = _cluster(tmp_path)
    model.replace(_objects(50), T0)  # no checkpoint loaded: the first save is whole
    slices = 0
    while cp.take_ahead_step():
        slices += 1
        if slices == 2:  # between two slices: some change, some go
            model.replace(_objects(45, seq=2), T0 + 1)
    assert slices >= 3  # the memory's 50 rows did not go in one slice
    cp.save()
    stored = read_state(tmp_path)
    assert stored is not None and stored["unitsignals"] == cp.state()["unitsignals"]
    assert len(stored["unitsignals"]["objects"]) == 45
    cp.close()
