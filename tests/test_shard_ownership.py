"""A checkpoint restored by a shard that no longer owns all of its workloads (a StatefulSet
scaled up, pod 0 keeping its volume; the shard count shrinking; an index changing): the shard
keeps only its own, drops the rest from its state, its exposition and its store, so every
workload is exported by exactly one shard and a sum() over the shards is the truth."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

from exporter.model.sharding import Shard, shard_of
from exporter.sinks.metrics.exposition import render_bytes
from exporter.wiring.events import Pipeline
from exporter.wiring.state.checkpoint import Checkpointer
from exporter.wiring.state.store import read_state
from tests.serving import Serve, scrape
from tests.simlogs import assert_matches_truth, finite_logs, parse, value
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer

WORKLOADS = [w.id for w in SimConfig(workloads=8).workload_list()]


def _workloads_in(samples: dict[Any, float]) -> set[str]:
    return {dict(labels)["workload"] for _, labels in samples if "workload" in dict(labels)}


async def _until(pred: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await pred():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


async def _ready(url: str, session: aiohttp.ClientSession) -> bool:
    try:
        async with session.get(url + "/readyz") as r:
            return r.status == 200
    except aiohttp.ClientError:
        return False


def _foreign_rows(state: dict[str, Any], foreign: set[str]) -> list[Any]:
    """Stored rows naming a workload of `foreign`: its log, or any series labelled with it."""
    rows: list[Any] = [w for w in state["workloads"] if w in foreign]
    for name, series in state["metrics"].items():
        rows += [(name, r) for r in series if any(v in foreign for v in r if type(v) is str)]
    return rows


async def test_scaling_from_one_shard_to_two_exports_each_workload_once(tmp_path: Path):
    logs, truth = finite_logs(seed=23, workloads=8, seconds=120, rate=0.5)
    owned = {i: {w for w in WORKLOADS if shard_of(w, 2) == i} for i in (0, 1)}
    assert owned[0] and owned[1]
    route = RouteServer(SimConfig(workloads=8).workload_list())
    base = await route.start()
    for w, evs in logs.items():
        route.append(w, evs)
    state0, state1 = tmp_path / "state-0", tmp_path / "state-1"
    common = ("--events-url", base, "--wait", "1", "--discovery-interval", "0.5",
              "--backoff-max", "0.2")
    alone = Serve(*common, "--state-dir", str(state0))
    shard0 = Serve(*common, "--state-dir", str(state0), "--total-shards", "2", "--shard", "0")
    shard1 = Serve(*common, "--state-dir", str(state1), "--total-shards", "2", "--shard", "1")
    try:
        async with aiohttp.ClientSession() as s:
            await alone.start()

            async def alone_caught_up() -> bool:
                got = await scrape(alone.url, s)
                return got is not None and all(
                    value(got, "zaroz_events_last_seq", workload=w) == len(logs[w])
                    for w in WORKLOADS)

            await _until(alone_caught_up, "one shard did not catch up")
            await alone.terminate()  # its last checkpoint holds all 8
            stored = read_state(state0)
            assert stored is not None and set(stored["workloads"]) == set(WORKLOADS)

            await shard0.start()
            await shard1.start()

            async def both_ready() -> bool:
                return await _ready(shard0.url, s) and await _ready(shard1.url, s)

            await _until(both_ready, "the two shards did not become ready")
            got0, got1 = await scrape(shard0.url, s), await scrape(shard1.url, s)
            assert got0 is not None and got1 is not None
    finally:
        for serve in (alone, shard0, shard1):
            await serve.terminate()
        await route.stop()
    # Each workload is exported by exactly one shard: its owner.
    assert _workloads_in(got0) == owned[0], sorted(_workloads_in(got0))
    assert _workloads_in(got1) == owned[1], sorted(_workloads_in(got1))
    # A sum() over the fleet of every event-log counter and histogram is the truth.
    fleet: dict[Any, float] = {}
    for got in (got0, got1):
        for k, v in got.items():
            if "workload" in dict(k[1]):
                fleet[k] = fleet.get(k, 0.0) + v
    assert assert_matches_truth(fleet, truth, WORKLOADS) > 100
    assert value(got0, "zaroz_exporter_workloads_dropped_total",
                 reason="other_shard") == len(owned[1])
    assert value(got1, "zaroz_exporter_workloads_dropped_total", reason="other_shard") == 0
    # Shard 0's store holds nothing of the workloads it gave up.
    stored = read_state(state0)
    assert stored is not None and set(stored["workloads"]) == owned[0]
    assert not _foreign_rows(stored, owned[1])


def _fleet_pipeline() -> Pipeline:
    logs, _ = finite_logs(seed=29, workloads=8, seconds=60, rate=0.5)
    p = Pipeline()
    for w, evs in logs.items():
        for e in evs[: len(evs) // 2]:  # units in flight: rows of every kind
            p.workload(w).offer(e)
    return p


def test_a_shrinking_shard_count_or_a_moved_index_drops_what_the_shard_gave_up(tmp_path: Path):
    # Saved by one shard, restored as shard 0 of 2, 2 of 3 (the count grew, the index moved),
    # 0 of 2 (the count shrank) and 1 of 2 (the index moved): each restore keeps exactly the
    # workloads the shard owns now, of those it had.
    p = _fleet_pipeline()
    cp = Checkpointer(tmp_path, p)
    cp.save()
    cp.close()
    kept = set(WORKLOADS)
    for shard in (Shard(0, 2), Shard(2, 3), Shard(0, 2), Shard(1, 2)):
        q = Pipeline()
        cp = Checkpointer(tmp_path, q, shard=shard)
        cp.load()
        mine = {w for w in kept if shard.owns(w)}
        assert set(q.logs) == mine
        exposed = parse(render_bytes(q.registry).decode())
        assert _workloads_in(exposed) <= mine
        for w in mine:  # what it keeps continues exactly
            assert q.logs[w].snapshot() == p.logs[w].snapshot()
        # In proportion: the save deletes what was given up and rewrites nothing it keeps.
        ch = cp.changes()
        assert not ch.full and {w for w, in ch.workloads_gone} == kept - mine
        assert not ch.workloads and not ch.units and not ch.pending
        assert {f for f, _, _, _ in ch.series} <= {"zaroz_exporter_workloads_dropped_total"}
        cp.store.write(ch)
        cp.close()
        stored = read_state(tmp_path)
        assert stored is not None and set(stored["workloads"]) == mine
        assert not _foreign_rows(stored, set(WORKLOADS) - mine)
        kept = mine
