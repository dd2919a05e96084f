"""UnitSignals across restarts of the real `serve` on its state dir, against the emulated API
server: an unchanged object adds nothing at a restart (SIGTERM or SIGKILL), an object changed
while the exporter was down is measured exactly once, one deleted meanwhile leaves the
exposition and the store."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import aiohttp

from exporter.model.sharding import Shard
from exporter.wiring.state.store import read_state
from tests.serving import Serve, scrape
from tests.unitsignals import iso
from zaroz_sim.kube.emulator import KubeEmulator

WL_LABEL = "units.zaroz.cloud/workload"
WL = {WL_LABEL: "wl-1"}
NS = "ns-a"
N = 50
PREFIX = "zaroz_unitsignal_"
LAG_SECONDS = "zaroz_unitsignal_generation_lag_seconds"  # now - pending since: moves with time
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _spec(name: str, generation: int) -> dict[str, Any]:
    return {"unitId": f"unit-{name}", "key": name, "contractVersion": 1,
            "generation": generation, "userData": {}, "allocation": None, "draining": False}


def _status(**over: Any) -> dict[str, Any]:
    s = {"observedGeneration": 1, "agentVersion": "1.4.2", "signalledReady": None,
         "accepting": False, "activity": None, "activitySince": None,
         "shutdownRequestedAt": None, "allocationAck": None, "seq": 5}
    s.update(over)
    return s


def _populate(emu: KubeEmulator) -> None:
    """50 objects, every kind of first-sight measurement among them: readiness (most), clock
    skew (readiness before creation), a generation waiting for the agent, violations (the agent
    ahead of the spec, an acknowledgement of no allocation)."""
    later = iso(time.time() + 3600)
    for i in range(N):
        name = f"u{i:02d}"
        if i % 10 == 0:
            emu.create(NS, name, _spec(name, 1), WL, _status(signalledReady="2020-01-01T00:00:00Z"))
        elif i % 10 == 1:  # generation 2 written, the agent still on 1: not ready yet
            emu.create(NS, name, _spec(name, 2), WL, _status(observedGeneration=1))
        elif i % 10 == 2:
            emu.create(NS, name, _spec(name, 1), WL,
                       _status(observedGeneration=3, signalledReady=later))
        elif i % 10 == 3:
            emu.create(NS, name, _spec(name, 1), WL,
                       _status(allocationAck="no-such-allocation", signalledReady=later))
        else:
            emu.create(NS, name, _spec(name, 1), WL, _status(signalledReady=later))


def _signals(samples: Samples) -> Samples:
    return {k: v for k, v in samples.items() if k[0].startswith(PREFIX)}


def _total(samples: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def _same_series(before: Samples, t_before: float, after: Samples, t_after: float) -> None:
    """Every zaroz_unitsignal_* series identical; a waiting generation's age has moved on by
    the wall time between the two scrapes, no more (its start is the same)."""
    assert before.keys() == after.keys(), sorted(before.keys() ^ after.keys())[:10]
    moved = {k: (before[k], after[k]) for k in before
             if k[0] != LAG_SECONDS and before[k] != after[k]}
    assert not moved, sorted(moved.items())[:10]
    for k in before:
        if k[0] == LAG_SECONDS and before[k] > 0:
            assert abs((t_after - after[k]) - (t_before - before[k])) < 2.5, (k, before[k],
                                                                            after[k])


class Exporter:
    """`serve` on one state dir, watching the emulator; `settled` is a scrape taken once the
    list after a start is applied (/readyz answers 200)."""

    def __init__(self, emu_url: str, state_dir: Path, *args: str) -> None:
        self.serve = Serve("--kube", "on", "--kube-api-url", emu_url, "--backoff-max", "0.2",
                           "--state-dir", str(state_dir), "--checkpoint-interval", "0.5", *args)

    async def start(self, objects: int) -> tuple[Samples, float]:
        await self.serve.start()
        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as s:
            while True:
                async with s.get(self.serve.url + "/readyz") as r:
                    ready = r.status == 200
                got = await scrape(self.serve.url, s) if ready else None
                if got is not None and _total(got, "zaroz_workload_unitsignals") == objects:
                    # a scrape answers only once a checkpoint covers what it shows
                    return _signals(got), time.time()
                assert time.monotonic() < deadline, "the exporter did not list the objects"
                await asyncio.sleep(0.1)

    async def start_settled(self, objects: int) -> tuple[Samples, float]:
        """A scrape of the running exporter once it shows `objects` UnitSignals."""
        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as s:
            while True:
                got = await scrape(self.serve.url, s)
                if got is not None and _total(got, "zaroz_workload_unitsignals") == objects:
                    return _signals(got), time.time()
                assert time.monotonic() < deadline, "the exporter did not list the objects"
                await asyncio.sleep(0.1)

    async def stop(self, how: str) -> None:
        await (self.serve.kill() if how == "kill" else self.serve.terminate())


async def test_unitsignals_measured_once_across_restarts(tmp_path: Path) -> None:
    emu = KubeEmulator(seed=11, bookmark_interval_s=0.2)
    url = await emu.start()
    exporter = Exporter(url, tmp_path / "state")
    try:
        _populate(emu)
        first, t_first = await exporter.start(N)
        ready = _total(first, "zaroz_unitsignal_ready_seconds_count")
        skew = _total(first, "zaroz_unitsignal_clock_skew_total")
        violations = _total(first, "zaroz_unitsignal_conformance_violations_total")
        assert (ready, skew) == (40, 5)  # measured at first sight, once each
        assert violations == 10  # 5 agents ahead of their spec, 5 unknown acknowledgements

        # Unchanged objects, three restarts, both ways of stopping: nothing moves.
        for how in ("term", "kill", "kill"):
            await exporter.stop(how)
            again, t_again = await exporter.start(N)
            _same_series(first, t_first, again, t_again)

        # While the exporter is down: 5 agents reach their generation, 3 objects become ready,
        # 2 agents restart (seq back), 4 objects are deleted.
        await exporter.stop("kill")
        waiting = [f"u{i:02d}" for i in range(1, N, 10)]
        for name in waiting:
            emu.patch_status(NS, name, {"observedGeneration": 2})
        for name in ("u11", "u21", "u31"):
            emu.patch_status(NS, name, {"signalledReady": iso(time.time() + 3600)})
        for name in ("u04", "u05"):
            emu.patch_status(NS, name, {"seq": 1})
        deleted = ["u06", "u07", "u16", "u17"]
        for name in deleted:
            emu.delete(NS, name)
        changed, t_changed = await exporter.start(N - len(deleted))
        assert _total(changed, "zaroz_unitsignal_generation_observe_seconds_count") == (
            _total(first, "zaroz_unitsignal_generation_observe_seconds_count") + len(waiting))
        assert _total(changed, "zaroz_unitsignal_ready_seconds_count") == ready + 3
        assert _total(changed, "zaroz_unitsignal_clock_skew_total") == skew
        assert _total(changed, "zaroz_unitsignal_conformance_violations_total",
                      rule="agent_restart") == 2
        assert _total(changed, "zaroz_unitsignal_conformance_violations_total") == (
            violations + 2)
        left = {dict(ls).get("unitsignal") for (_, ls) in changed}
        assert not left & set(deleted)
        assert _total(changed, "zaroz_unitsignal_generation_lag") == 0

        # And those changes are not measured again at the next restarts.
        for how in ("kill", "term"):
            await exporter.stop(how)
            again, t_again = await exporter.start(N - len(deleted))
            _same_series(changed, t_changed, again, t_again)
        await exporter.stop("term")
        stored = read_state(tmp_path / "state")
        assert stored is not None
        names = [name for _, name, _ in stored["unitsignals"]["objects"]]
        assert sorted(names) == sorted(f"u{i:02d}" for i in range(N)
                                       if f"u{i:02d}" not in deleted)
    finally:
        await exporter.stop("kill")
        await emu.stop()


async def test_a_shard_remembers_only_the_unitsignals_it_owns(tmp_path: Path) -> None:
    """One exporter, then two shards on the same state dir (the StatefulSet scaled up, pod 0
    keeps its volume): shard 0 keeps and stores the memory of its own workloads' objects only,
    and does not measure them again."""
    emu = KubeEmulator(seed=12, bookmark_interval_s=0.2)
    url = await emu.start()
    workloads = [f"wl-{i}" for i in range(8)]
    mine = {w for w in workloads if Shard(0, 2).owns(w)}
    assert 0 < len(mine) < len(workloads)
    later = iso(time.time() + 3600)
    for w in workloads:
        for j in range(3):
            emu.create(NS, f"{w}-{j}", _spec(f"{w}-{j}", 1), {WL_LABEL: w},
                       _status(signalledReady=later))
    state = tmp_path / "state"
    one = Exporter(url, state)
    shard0 = Exporter(url, state, "--total-shards", "2", "--shard", "0")
    try:
        everything, _ = await one.start(3 * len(workloads))
        await one.stop("kill")
        stored = read_state(state)
        assert stored is not None and len(stored["unitsignals"]["objects"]) == 24
        own, _ = await shard0.start(3 * len(mine))
        for w in mine:  # measured once, before the shards changed
            assert _total(own, "zaroz_unitsignal_ready_seconds_count", workload=w) == 3
            assert _total(own, "zaroz_unitsignal_ready_seconds_count", workload=w) == _total(
                everything, "zaroz_unitsignal_ready_seconds_count", workload=w)
        assert {dict(ls)["workload"] for (n, ls) in own if n == "zaroz_unitsignal_info"} == mine
        await shard0.stop("term")
        stored = read_state(state)
        assert stored is not None
        assert sorted(name for _, name, _ in stored["unitsignals"]["objects"]) == sorted(
            f"{w}-{j}" for w in mine for j in range(3))
    finally:
        await one.stop("kill")
        await shard0.stop("kill")
        await emu.stop()


async def test_sigkill_while_unitsignals_change_measures_each_change_once(
        tmp_path: Path) -> None:
    """Objects created (ready) and generations observed while the exporter runs, scraped and
    checkpointed, and SIGKILLed at moments that fall anywhere: in the end each readiness and
    each generation reached is measured exactly once (what the last commit covered is not
    measured again, what came after it is measured by the next list)."""
    rng = random.Random(3)
    emu = KubeEmulator(seed=13, bookmark_interval_s=0.2)
    url = await emu.start()
    exporter = Exporter(url, tmp_path / "state")
    later = iso(time.time() + 3600)
    created = observed = 0
    try:
        await exporter.start(0)
        async with aiohttp.ClientSession() as session:
            for _ in range(4):
                for _ in range(rng.randrange(15, 30)):
                    name = f"r{created:03d}"
                    emu.create(NS, name, _spec(name, 2), WL,
                               _status(observedGeneration=1, signalledReady=later))
                    created += 1
                    if rng.random() < 0.3:
                        await scrape(exporter.serve.url, session)  # a checkpoint, mid-stream
                    if created > 5 and rng.random() < 0.4:
                        prev = f"r{rng.randrange(created - 5):03d}"
                        if emu.get(NS, prev)["status"]["observedGeneration"] == 1:
                            emu.patch_status(NS, prev, {"observedGeneration": 2})
                            observed += 1
                    await asyncio.sleep(rng.uniform(0, 0.02))
                await asyncio.sleep(rng.uniform(0, 0.6))
                await exporter.stop("kill")
                await exporter.start(created)
            final, _ = await exporter.start_settled(created)
        assert _total(final, "zaroz_unitsignal_ready_seconds_count") == created
        assert _total(final, "zaroz_unitsignal_generation_observe_seconds_count") == observed
        assert _total(final, "zaroz_unitsignal_conformance_violations_total") == 0
    finally:
        await exporter.stop("kill")
        await emu.stop()
