"""The incremental state store: what it holds equals the model's whole state, field by field,
after a round trip, after a conversion from checkpoint.json, and after any sequence of events and
saves; and a checkpoint after K events writes O(K) rows, whatever the size of the fleet."""

from __future__ import annotations

import itertools
import random
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from exporter.sinks.traces.otlp import TraceConfig, TraceSink
from exporter.wiring.events import Pipeline
from exporter.wiring.state.checkpoint import CONVERTED, FILE, Checkpointer, CheckpointError
from exporter.wiring.state.store import DB, Changes, Store, read_state, row_of
from tests.simlogs import finite_logs
from zaroz_sim.fleet import envelope, unit_of

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
LOGS, _ = finite_logs(seed=5, workloads=2, seconds=150, rate=0.7)


class _Kept(SpanExporter):
    """Handles no span until shut down: released spans stay unhandled while a test runs."""

    def __init__(self) -> None:
        self.open = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.open.wait()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.open.set()


def _pipeline(traces: bool = True) -> Pipeline:
    sink = TraceSink(_Kept(), TraceConfig(max_queue_size=8192), sdk=True) if traces else None
    return Pipeline(traces=sink)


def _ev(seq: int, kind: str, at_s: float, k: int | None, **data: Any) -> dict[str, Any]:
    unit = None if k is None else unit_of(0, k, "rich", "wl-rich")
    return envelope(0, seq, kind, T0 + int(at_s * NS), unit, data)


def _rich_log() -> list[dict[str, Any]]:
    """One workload with every kind of state: units in every phase, counts of every outcome."""
    evs: list[tuple[str, float, int | None, dict[str, Any]]] = [
        ("units.scaled", 0, None, {"from": 0, "to": 6, "reason": "initial"}),
        ("unit.created", 1, 0, {}), ("unit.ready", 3, 0, {}),
        ("unit.allocated", 4, 0, {}),                                      # ack pending
        ("unit.created", 1.5, 1, {}),                                      # not ready yet
        ("unit.created", 2, 2, {}), ("unit.ready", 5, 2, {}),
        ("unit.draining", 6, 2, {"reason": "scale_down"}),                  # drain open
        ("unit.created", 2, 3, {}), ("unit.ready", 4, 3, {}),
        ("unit.allocated", 5, 3, {}), ("unit.stopped", 6, 3, {}),          # abandoned
        ("unit.failed", 7, 3, {"reason": "oom-kill"}),                      # a reason kept
        ("unit.destroyed", 8, 3, {"reason": "evicted"}),
        ("unit.created", 2, 4, {}), ("unit.ready", 4, 4, {}),
        ("unit.exited", 9, 4, {"code": 137, "restarted": True}),           # incarnation open
        ("unit.created", 2, 5, {}), ("unit.ready", 2.5, 5, {}),
        ("unit.allocated", 3, 5, {}), ("unit.allocation_delivered", 3.2, 5, {}),
        ("unit.busy", 4, 5, {}),
        ("unit.created", 0.5, 6, {}),                                      # expired below
    ]
    return [_ev(i + 1, kind, at, k, **data) for i, (kind, at, k, data) in enumerate(evs)]


def _rich(p: Pipeline) -> Pipeline:
    log = _rich_log()
    wl = p.workload("wl-rich")
    for e in log[:-1]:
        wl.offer(e)
    wl.offer(log[-1], "route")
    p.expire_workload("wl-rich", T0 + int(1.0 * NS) + wl.idle_ns)  # unit 6 only
    n = len(log)
    wl.offer(_ev(n + 2, "unit.accepting", 10, 0))                   # waits behind seq n+1
    wl.offer({"seq": n + 3, "type": "unit.ready", "bogus": True})   # invalid, with its seq
    wl.offer(_ev(n + 4, "unit.idle", 11, 5), "webhook")
    other = p.workload("wl-1")  # and a simulated log with its own mix
    for e in LOGS["wl-1"][:200]:
        other.offer(e)
    p.registry.hold(["wl-1"])
    return p


def _diff(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """Where two plain-data states differ, as paths (field by field)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                yield f"{path}/{k}: only in {'second' if k in b else 'first'}"
            else:
                yield from _diff(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _diff(x, y, f"{path}/{i}")
    elif a != b or type(a) is not type(b):
        yield f"{path}: {a!r} != {b!r}"


def _plain(state: Any) -> Any:
    """As JSON would give it back, each family's rows in label order (their order is no
    state: the store keeps them by key, the registry by creation)."""
    out = orjson.loads(orjson.dumps(state))
    if isinstance(out, dict):
        # The cumulative series' start times are the checkpoint's (given at a save, for OTLP
        # export), not the model's state: compared on their own below.
        rows = out.get("rows", {})
        rows.pop("starts", None)
        if not rows:
            out.pop("rows", None)
    if isinstance(out, dict) and "metrics" in out:
        out["metrics"] = {n: sorted(rows, key=lambda r: orjson.dumps(r))
                          for n, rows in out["metrics"].items()}
    return out


def _same(a: Any, b: Any) -> None:
    diffs = list(_diff(_plain(a), _plain(b)))
    assert not diffs, "\n".join(diffs[:20])


def _close(cp: Checkpointer) -> None:
    cp.close()
    if cp.pipeline.traces is not None:
        cp.pipeline.traces.exporter.shutdown()
        cp.pipeline.traces.shutdown(timeout=5)


def test_every_kind_of_state_survives_save_load_and_save_again(tmp_path: Path):
    p = _pipeline()
    cp = Checkpointer(tmp_path, p)  # first, as serve does: spans wait for checkpoints
    _rich(p)
    before = cp.state()  # (the trace counters as this save freezes them)
    cp.save()
    log = before["workloads"]["wl-rich"]["log"]
    # The state is rich: each of these is a field a restore could leave out.
    assert log["expired"] == 1 and log["desired"] == 6 and len(log["pending"]) == 3
    assert [s for s, ev in log["pending"] if ev is None] and len(log["sources"]) == 3
    units = log["units"]
    assert units[unit_of(0, 1, "rich", "wl-rich")["id"]][1] is False    # not ready
    assert units[unit_of(0, 0, "rich", "wl-rich")["id"]][3] is not None  # ack pending
    assert units[unit_of(0, 2, "rich", "wl-rich")["id"]][4] is not None  # draining
    labels = before["workloads"]["wl-rich"]["labels"]
    assert labels == {"failure_reasons": ["oom-kill"], "destroy_reasons": ["evicted"]}
    assert before["workloads"]["wl-1"]["held"] is True
    abandoned = [r for r in before["metrics"]["zaroz_unit_allocations_total"]
                 if r[:2] == ["wl-rich", "abandoned"]]
    assert abandoned == [["wl-rich", "abandoned", 1]]
    ready = next(r for r in before["metrics"]["zaroz_unit_ready_seconds"] if r[0] == "wl-rich")
    assert ready[-2] == 5 and sum(ready[-1]["count"]) == 5  # native buckets too
    traces = before["traces"]
    assert traces["builders"]["wl-rich"]["units"] and traces["outbox"]["spans"]
    assert traces["builders"]["wl-rich"]["expired"] == 1
    _same(read_state(tmp_path), before)  # the store holds what the model holds
    # ...and a start time for each series it stored, as the checkpoint gave them
    starts = {(n, k): ns for n, k, ns in read_state(tmp_path)["rows"]["starts"]}
    assert starts == cp.starts.known and len(starts) >= len(before["metrics"])
    cp.close()  # its sink exports nothing meanwhile (as if killed): every span is re-sent

    q = _pipeline()
    again = Checkpointer(tmp_path, q)
    try:
        assert again.load() == 2
        assert again.held_at_save == {"wl-1"}
        q.registry.hold(again.held_at_save)  # as serve does
        after = again.state()
        assert q.traces is not None and q.traces.outbox is not None
        resent = q.traces.outbox.resent
        assert resent == len(traces["outbox"]["spans"])
        # A span sent again is counted as sent again (outbox.py), not as a span again: the
        # only difference allowed.
        was = before["traces"]["stats"].pop("resent")
        assert after["traces"]["stats"].pop("resent") == was + resent
        _same(after, before)  # loaded: field by field the state that was saved
        assert again.save() is True  # (the resent count)
        assert again.save() is False  # nothing changed since: nothing to write
        again._synced = False  # saved again, whole, from the loaded state
        assert again.save() is True
        stored = read_state(tmp_path)
        assert stored is not None
        stored["traces"]["stats"].pop("resent")
        _same(stored, before)
    finally:
        _close(again)
        assert p.traces is not None
        p.traces.exporter.shutdown()
        p.traces.shutdown(timeout=5)


def test_a_version_2_checkpoint_is_converted_once_with_every_value(tmp_path: Path):
    p = _pipeline()
    old = Checkpointer(tmp_path / "old", p)
    _rich(p)
    old.save()  # as the old exporter did: the spans it held are released, not yet handled
    state = old.state()
    old.close()
    assert p.traces is not None and p.traces.outbox is not None
    resent = len(p.traces.outbox.released)
    v2 = {**state, "v": 2}  # checkpoint.json as version 2 wrote it
    v2 = orjson.loads(orjson.dumps(v2))
    state["traces"]["stats"]["resent"] += resent  # counted as sent again, not as spans again
    (tmp_path / FILE).write_bytes(orjson.dumps(v2))
    q = _pipeline()
    cp = Checkpointer(tmp_path, q)
    assert cp.load() == 2
    assert not (tmp_path / FILE).exists()
    assert orjson.loads((tmp_path / CONVERTED).read_bytes()) == v2  # kept, read by nothing
    q.registry.hold(cp.held_at_save)
    _same(cp.state(), state)
    _same(read_state(tmp_path), state)
    cp.close()  # its spans never handled: the next start sends them again
    (tmp_path / CONVERTED).write_bytes(b"not read again")
    r = _pipeline()
    later = Checkpointer(tmp_path, r)
    assert later.load() == 2  # from the store
    r.registry.hold(later.held_at_save)
    state["traces"]["stats"]["resent"] += resent  # and again
    _same(later.state(), state)
    for c in (later, cp, old):
        _close(c)


def _fleet(units: int, workloads: int) -> tuple[Pipeline, Checkpointer, Path]:
    """`units` ready units over `workloads` workloads, saved once (the whole store)."""
    p = Pipeline()
    for w in range(workloads):
        wid = f"wl-{w + 1}"
        evs = []
        for k in range(units // workloads):
            u = unit_of(w, k, "fleet", wid)
            at = T0 + k * 1000
            evs.append(envelope(w, len(evs) + 1, "unit.created", at, u, {}))
            evs.append(envelope(w, len(evs) + 1, "unit.ready", at + 2 * NS, u, {}))
        p.workload(wid).offer_many(evs, None)
    d = Path(tempfile.mkdtemp())
    cp = Checkpointer(d, p)
    cp.save()
    assert cp.last_rows > units  # the first save writes the whole fleet
    return p, cp, d


def _k_events(p: Pipeline, first: int, k: int) -> None:
    """K allocations, on K units of the first workload from the `first`."""
    wl = p.workload("wl-1")
    seq = wl.applied_through
    for i in range(k):
        wl.offer(envelope(0, seq + i + 1, "unit.allocated", T0 + 3600 * NS + i,
                          unit_of(0, first + i, "fleet", "wl-1"), {}))


def test_a_checkpoint_after_k_events_writes_rows_in_proportion_to_k_not_to_the_fleet():
    rows, sizes = {}, {}
    for units in (10_000, 20_000):
        p, cp, d = _fleet(units, 10)
        first = 0
        for k in (10, 40):
            _k_events(p, first, k)
            first += k
            assert cp.save() is True
            rows[units, k], sizes[units, k] = cp.last_rows, _bytes(cp)
        cp.close()
        stored = read_state(d)
        _same(stored, cp.state())
    for k in (10, 40):
        # the units changed, the workload that moved, the events_total series, and the start
        # time of a series the events made
        assert rows[10_000, k] == rows[20_000, k] <= k + 3
        assert abs(sizes[10_000, k] - sizes[20_000, k]) <= 16  # a longer cursor, no more
    assert rows[10_000, 40] > rows[10_000, 10]


def _bytes(cp: Checkpointer) -> float:
    return cp.pipeline.registry["zaroz_checkpoint_bytes"].series[()].value  # type: ignore[index]


# -- incremental saves equal the whole state ------------------------------------------------------

_POOL = {w: evs[:260] for w, evs in LOGS.items()}
_steps = st.lists(st.tuples(st.one_of(
    st.tuples(st.just("offer"), st.sampled_from(sorted(_POOL)), st.integers(1, 40),
              st.booleans(), st.booleans()),
    st.tuples(st.just("late")),
    st.tuples(st.just("save")),
    st.tuples(st.just("expire"), st.integers(0, 40)),
    st.tuples(st.just("give_up"), st.sampled_from(sorted(_POOL))),
    st.tuples(st.just("hold"), st.sampled_from([(), ("wl-1",), ("wl-1", "wl-2")])),
    st.tuples(st.just("reload")),
), st.booleans()), min_size=1, max_size=25)  # (step, then save and compare)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_steps, seed=st.integers(0, 2**16), traces=st.booleans())
def test_incremental_saves_load_as_the_whole_state(steps: list[tuple[Any, ...]], seed: int,
                                                   traces: bool):
    rng = random.Random(seed)
    fed = dict.fromkeys(_POOL, 0)
    late: list[tuple[str, dict[str, Any]]] = []  # held back: what follows waits behind them
    with tempfile.TemporaryDirectory() as d:
        p = _pipeline(traces)
        cp = Checkpointer(d, p)
        try:
            for step, then_save in steps:
                if step[0] == "offer":  # the next n events, shuffled, some twice, one late
                    _, w, n, shuffle, hold_one = step
                    batch = _POOL[w][fed[w]:fed[w] + n]
                    fed[w] += len(batch)
                    if hold_one and batch:
                        late.append((w, batch.pop(0)))
                    if shuffle:
                        rng.shuffle(batch)
                        batch += batch[: n // 4]
                    for e in batch:
                        p.workload(w).offer(e, rng.choice(["route", "webhook"]))
                elif step[0] == "late":
                    for w, e in late:
                        p.workload(w).offer(e, "route")
                    late.clear()
                elif step[0] == "save":
                    expected = cp.state()
                    cp.save()
                    _same(read_state(d), expected)
                elif step[0] == "expire":
                    for w, wl in p.logs.items():
                        if wl.clock:
                            p.expire_workload(w, wl.clock + wl.idle_ns - step[1] * NS // 4)
                elif step[0] == "give_up":
                    if step[1] in p.logs:
                        p.logs[step[1]].flush()
                elif step[0] == "hold":
                    p.registry.hold(step[1])
                else:  # a restart from what is stored
                    cp.save()
                    _close(cp)
                    p = _pipeline(traces)
                    cp = Checkpointer(d, p)
                    cp.load()
                    p.registry.hold(cp.held_at_save)
                if then_save:
                    expected = cp.state()
                    cp.save()
                    _same(read_state(d), expected)
            expected = cp.state()
            cp.save()
            _same(read_state(d), expected)
        finally:
            _close(cp)


def test_a_series_removed_leaves_the_store_at_the_next_checkpoint(tmp_path: Path):
    """(A route workload or a watch scope forgotten drops its series: sinks/metrics/route.py.)"""
    p = _pipeline(traces=False)
    cp = Checkpointer(tmp_path, p)
    for e in LOGS["wl-1"][:50]:
        p.workload("wl-1").offer(e)
    requests = p.registry.counter("zaroz_route_requests_total")
    requests.labels("wl-1", "ok").inc(3)
    cp.save()
    stored = read_state(tmp_path)
    assert stored is not None and ["wl-1", "ok", 3] in stored["metrics"][
        "zaroz_route_requests_total"]
    requests.remove("wl-1", "ok")
    expected = cp.state()
    assert cp.save() is True
    _same(read_state(tmp_path), expected)
    cp.close()


async def test_a_failed_write_is_folded_into_the_next_which_restores_durability(
        tmp_path: Path):
    """Two scrapes: the first one's write fails (any exception, not only an I/O error) in the
    writer thread after the second took its changes on top of it. The first is refused; the
    second writes both (what the failed one took was kept, later rows winning), in rows of
    what changed, not the whole state, and the store then holds exactly the model."""
    p = _pipeline(traces=False)
    cp = Checkpointer(tmp_path, p)
    feed = iter(LOGS["wl-1"])
    for e in itertools.islice(feed, 50):
        p.workload("wl-1").offer(e)
    assert cp.save() is True
    whole = cp.last_rows
    append = cp.store._append
    fail = [True]

    def failing(batch: Any) -> None:
        if fail[0]:
            fail[0] = False
            raise RuntimeError("no space left on device")
        append(batch)

    cp.store._append = failing  # type: ignore[method-assign]
    p.workload("wl-1").offer(next(feed))
    first = cp.begin_save()
    p.workload("wl-1").offer(next(feed))
    second = cp.begin_save()  # taken before the first one's failure is known
    with pytest.raises(CheckpointError, match="no space left"):
        await first()
    assert await second() is True
    assert cp.last_rows < whole  # what changed, not the whole store again
    expected = cp.state()
    _same(read_state(tmp_path), expected)
    p.workload("wl-1").offer(next(feed))
    assert cp.save() is True
    _same(read_state(tmp_path), cp.state())
    cp.close()


async def test_a_wait_cancelled_while_its_write_is_queued_loses_no_write(tmp_path: Path):
    """The periodic save waits for its write behind a scrape's, and shutdown cancels the
    wait: the write still happens (its changes were taken: they are nowhere else), and the
    saves after it store exactly the state (found by review: the queued write was dropped)."""
    import asyncio

    p = _pipeline(traces=False)
    cp = Checkpointer(tmp_path, p)
    feed = iter(LOGS["wl-1"])
    for e in itertools.islice(feed, 50):
        p.workload("wl-1").offer(e)
    assert cp.save() is True
    held = threading.Event()
    cp._writer().submit(held.wait)  # a write in progress (a scrape's, say)
    for e in itertools.islice(feed, 30):
        p.workload("wl-1").offer(e)
    waiting = asyncio.ensure_future(cp.begin_save()())  # queued behind it
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    held.set()
    p.workload("wl-1").offer(next(feed))
    expected = cp.state()
    assert cp.save() is True
    _same(read_state(tmp_path), expected)
    cp.close()


async def test_spans_leave_only_with_the_checkpoint_that_holds_them(tmp_path: Path):
    p = _pipeline()
    cp = Checkpointer(tmp_path, p)
    assert p.traces is not None and p.traces.outbox is not None
    box = p.traces.outbox
    log = LOGS["wl-1"]
    try:
        for e in log[:150]:
            p.workload("wl-1").offer(e)
        covered = [serial for serial, _ in box.held]
        durable = cp.begin_save()
        for e in log[150:300]:  # spans ended while that checkpoint is being written
            p.workload("wl-1").offer(e)
        later = [serial for serial, _ in box.held if serial not in covered]
        assert covered and later
        assert await durable() is True
        assert [serial for serial, _ in box.released] == covered
        assert [serial for serial, _ in box.held] == later  # they wait for the next one
        assert cp.save() is True
        assert [serial for serial, _ in box.released] == covered + later and not box.held
    finally:
        _close(cp)


def test_rows_this_version_cannot_read_are_rewritten_once_not_refused_at_every_start(
        tmp_path: Path):
    p = _pipeline(traces=False)
    cp = Checkpointer(tmp_path, p)
    for e in LOGS["wl-1"][:300]:
        p.workload("wl-1").offer(e)
    cp.save()
    cp.close()
    # As a store from before zaroz_events_duplicate_total had its `source` label.
    _with_old_duplicate_series(tmp_path)
    q = _pipeline(traces=False)
    once = Checkpointer(tmp_path, q)
    once.load()
    dup = q.registry.counter("zaroz_events_duplicate_total")
    assert all(s.value == 0 for s in dup.series.values())  # restarted at zero, once
    dup.labels("wl-1", "route").inc(2)
    expected = once.state()
    once.save()
    once.close()
    _same(read_state(tmp_path), expected)  # the old rows are gone
    r = _pipeline(traces=False)
    later = Checkpointer(tmp_path, r)
    later.load()
    assert r.registry.counter("zaroz_events_duplicate_total").labels("wl-1", "route").value == 2
    later.close()


def _with_old_duplicate_series(state_dir: Path) -> None:
    """The store as one from before zaroz_events_duplicate_total had its `source` label."""
    store = Store(state_dir / DB)
    db = store._open()
    with db.write_batch(sync=True) as batch:
        for k, v in db.iterator(prefix=b"series\0"):
            if row_of(v)[0] == "zaroz_events_duplicate_total":
                batch.delete(k)
    store.write(Changes(series=[
        ("zaroz_events_duplicate_total", orjson.dumps(["wl-1"]).decode(), 7, None)]))
    store.close()
