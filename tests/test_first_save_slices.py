"""The first save of a process that loaded no checkpoint takes every row of the state: it is
taken in slices between turns of the event loop (Checkpointer.take_ahead), so /healthz is
answered in the middle of it, and the store still equals the state at the save's own moment,
with events applied between the slices (units changed, made and destroyed, in workloads taken
already and in those still to take). Asserted by loop turns and order, never by wall time."""

from __future__ import annotations

import asyncio
import random
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.sinks.metrics.family import Registry
from exporter.web.app import MetricsServer, start_site
from exporter.wiring.events import Pipeline
from exporter.wiring.state import checkpoint
from exporter.wiring.state.checkpoint import Checkpointer
from exporter.wiring.state.store import Store, read_state
from tests.simlogs import parse, value
from tests.test_state_store import _POOL, _close, _pipeline, _same
from zaroz_sim.fleet import envelope, unit_of

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
SIZES = {"wl-1": 3000, "wl-2": 400, "wl-3": 400, "wl-4": 400, "wl-5": 400}  # units


def _fleet() -> Pipeline:
    p = Pipeline(Registry(native=None))
    for w, (wid, n) in enumerate(SIZES.items()):
        evs = []
        for k in range(n):
            u = unit_of(w, k, "fleet", wid)
            at = T0 + k * 1000
            evs.append(envelope(w, len(evs) + 1, "unit.created", at, u, {}))
            evs.append(envelope(w, len(evs) + 1, "unit.ready", at + 2 * NS, u, {}))
        p.workload(wid).offer_many(evs, None)
    return p


def _event(p: Pipeline, rng: random.Random, made: dict[str, int]) -> None:
    """One event on a random workload: an allocation on a unit, a new unit, or one destroyed."""
    w = rng.randrange(len(SIZES))
    wid = f"wl-{w + 1}"
    wl = p.workload(wid)
    seq = wl.applied_through + 1
    at = T0 + 3600 * NS + seq * 1000
    kind = rng.choice(["unit.allocated", "unit.created", "unit.destroyed"])
    if kind == "unit.created":
        made[wid] = made.get(wid, SIZES[wid]) + 1
        u = unit_of(w, made[wid], "fleet", wid)
    else:
        u = unit_of(w, rng.randrange(SIZES[wid]), "fleet", wid)
    data: dict[str, Any] = {"reason": "scale_down"} if kind == "unit.destroyed" else {}
    wl.offer(envelope(w, seq, kind, at, u, data))


async def test_healthz_answers_during_a_large_first_save_and_the_store_is_the_state(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setattr(checkpoint, "SLICE_ROWS", 200)
    p = _fleet()
    cp = Checkpointer(tmp_path, p)  # loaded nothing: its first save takes the whole state
    turns = 0
    began: list[int] = []  # the loop turn at which the whole save's take began
    taken: list[int] = []  # ... and at which its last take (before the render) was done
    write = Store.write

    def tracked(stored: Any) -> None:
        if stored is None and not began:
            began.append(turns)
        track(stored)

    def recorded(self: Store, ch: Any) -> Any:
        return write(self, ch)

    def last_take() -> Any:
        ch = changes()
        taken.append(turns)
        return ch

    track, changes = cp._track, cp.changes
    monkeypatch.setattr(cp, "_track", tracked)
    monkeypatch.setattr(cp, "changes", last_take)
    monkeypatch.setattr(Store, "write", recorded)
    rng = random.Random(3)
    made: dict[str, int] = {}
    applied_between: list[int] = []
    healthz: list[int] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal turns
        while not stop.is_set():
            turns += 1
            if began and not taken:  # between two slices of the save: events go on
                _event(p, rng, made)
                applied_between.append(turns)
            await asyncio.sleep(0)

    runner, url = await start_site(MetricsServer(p.registry, checkpointer=cp).app,
                                   "127.0.0.1:0")
    tick = asyncio.create_task(ticker())
    try:
        async with aiohttp.ClientSession() as session:
            async def poll() -> None:
                while not stop.is_set():
                    async with session.get(f"{url}/healthz") as r:
                        assert r.status == 200
                        healthz.append(turns)

            poller = asyncio.create_task(poll())
            async with session.get(f"{url}/metrics") as r:
                assert r.status == 200
                body = await r.text()
            stop.set()
            await poller
    finally:
        stop.set()
        await tick
        await runner.cleanup()
    assert began and taken
    start, end = began[0], taken[0]
    assert end - start > 20, "the whole state was taken in one turn of the loop"
    assert any(start < t < end for t in healthz), (start, end, healthz[:5], healthz[-5:])
    assert len(applied_between) > 20
    cp.close()
    stored = read_state(tmp_path)
    assert stored is not None
    # Exactly the state at the save's moment: nothing was applied after its last take.
    _same(stored, cp.state())
    got = parse(body)
    for w in SIZES:
        assert value(got, "zaroz_events_last_seq", workload=w) == stored["workloads"][w]["cursor"]


_interleavings = st.lists(st.one_of(
    st.tuples(st.just("offer"), st.sampled_from(sorted(_POOL)), st.integers(1, 40)),
    st.tuples(st.just("slice"), st.integers(1, 4)),
    st.tuples(st.just("expire"), st.integers(0, 40)),
    st.tuples(st.just("give_up"), st.sampled_from(sorted(_POOL))),
    st.tuples(st.just("hold"), st.sampled_from([(), ("wl-1",), ("wl-1", "wl-2")])),
    st.tuples(st.just("save")),
), min_size=1, max_size=30)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_interleavings, first=st.integers(0, 260), seed=st.integers(0, 2**16),
       traces=st.booleans(), rows=st.sampled_from([1, 3, 17]))
def test_a_whole_save_taken_in_slices_with_changes_between_is_the_whole_state(
        steps: list[tuple[Any, ...]], first: int, seed: int, traces: bool, rows: int):
    """Slices of a due whole save (a fresh process's first, or the one after a failed write),
    with every kind of change between them (units changed, made, expired, gaps given up,
    workloads held and let go, series made), then the save: the store is the state."""
    rng = random.Random(seed)
    old = checkpoint.SLICE_ROWS
    checkpoint.SLICE_ROWS = rows
    try:
        with tempfile.TemporaryDirectory() as d:
            p = _pipeline(traces)
            fed = dict.fromkeys(_POOL, 0)
            for w in _POOL:  # the state before the first save: all of it taken in slices
                for e in _POOL[w][:first]:
                    p.workload(w).offer(e, rng.choice(["route", "webhook"]))
                fed[w] = first
            cp = Checkpointer(d, p)
            try:
                for step in steps:
                    if step[0] == "offer":
                        _, w, n = step
                        batch = _POOL[w][fed[w]:fed[w] + n]
                        fed[w] += len(batch)
                        rng.shuffle(batch)
                        for e in batch:
                            p.workload(w).offer(e, rng.choice(["route", "webhook"]))
                    elif step[0] == "slice":
                        for _ in range(step[1]):
                            cp.take_ahead_step()
                    elif step[0] == "expire":
                        for w, wl in p.logs.items():
                            if wl.clock:
                                p.expire_workload(w, wl.clock + wl.idle_ns - step[1] * NS // 4)
                    elif step[0] == "give_up":
                        if step[1] in p.logs:
                            p.logs[step[1]].flush()
                    elif step[0] == "hold":
                        p.registry.hold(step[1])
                    else:
                        expected = cp.state()
                        cp.save()
                        _same(read_state(d), expected)
                expected = cp.state()
                cp.save()
                _same(read_state(d), expected)
            finally:
                _close(cp)
    finally:
        checkpoint.SLICE_ROWS = old


@pytest.mark.parametrize(("before", "after"), [(("wl-1",), ()), ((), ("wl-1",))])
def test_a_workload_held_or_let_go_after_its_slice_is_stored_as_it_is_at_the_save(
        tmp_path: Path, before: tuple[str, ...], after: tuple[str, ...]):
    p = _pipeline(traces=False)
    for w in _POOL:
        for e in _POOL[w][:50]:
            p.workload(w).offer(e)
    cp = Checkpointer(tmp_path, p)
    p.registry.hold(before)
    while cp.take_ahead_step():  # every workload taken, held as `before`
        pass
    p.registry.hold(after)
    expected = cp.state()
    cp.save()
    _same(read_state(tmp_path), expected)
    _close(cp)

