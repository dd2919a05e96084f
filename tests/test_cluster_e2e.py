"""UnitSignals end to end: emulated API server (with faults) -> reflector -> model -> exposition.

The reference for "nothing lost or duplicated" is a fresh model fed the emulator's final objects
in one list: after any faults, the live exporter's per-object state must equal it.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.kube import KubeMetrics
from exporter.sources.backoff import Backoff
from exporter.sources.kube.api import KubeApi
from exporter.sources.kube.config import from_url
from exporter.sources.kube.handler import object_key
from exporter.sources.kube.reflector import KubeSource
from exporter.wiring.unitsignals import NamespaceHandler, build_cluster
from tests.unitsignals import status as full_status
from tests.waiting import until
from zaroz_sim.kube.emulator import KubeEmulator

WL = {"units.zaroz.cloud/workload": "wl-1"}


def spec(gen: int, key: str = "k", **over) -> dict:
    s = {"unitId": f"unit-{key}", "key": key, "contractVersion": 1, "generation": gen,
         "userData": {"card": "4111-customer"}, "allocation": None, "draining": False}
    s.update(over)
    return s


def samples(reg: Registry) -> dict:
    out = {}
    for fam in text_string_to_metric_families(render_bytes(reg).decode()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def object_state(reg: Registry) -> dict:
    """Per-UnitSignal series only (ages and clock-dependent values left out)."""
    return {k: v for k, v in samples(reg).items()
            if k[0].startswith("zaroz_unitsignal_") and "seconds" not in k[0]
            and "total" not in k[0]}


class Exporter:
    def __init__(self, emu: KubeEmulator, session, namespaces=None) -> None:
        self.reg = Registry()
        self.model, _ = build_cluster(self.reg, ("team",))
        api = KubeApi(session, from_url(emu.url), typed=True)  # as serve reads them
        self.source = KubeSource(
            api, lambda ns: NamespaceHandler(self.model, ns), KubeMetrics(self.reg),
            namespaces=namespaces, backoff_factory=lambda: Backoff(0.01, 0.05),
            page_size=7, attention_delay=0.05)

    async def until(self, cond, timeout: float = 10.0) -> None:
        await until(cond, timeout, interval=0.02)


@pytest.fixture
async def emu():
    e = KubeEmulator(seed=3, bookmark_interval_s=0.2, history=200)
    await e.start()
    yield e
    await e.stop()


@pytest.fixture
async def session():
    import aiohttp

    async with aiohttp.ClientSession() as s:
        yield s


def reference(emu: KubeEmulator) -> dict:
    ref = Registry()
    model, _ = build_cluster(ref, ("team",))
    objs = [emu.get(*k.split("/")) for k, _ in emu.store.items()]
    model.replace(objs, 0.0)
    return object_state(ref)


async def test_generation_lag_and_invalid_spec_through_the_api(emu, session):
    emu.create("ns-a", "u1", spec(1), labels=WL, status=full_status(observedGeneration=1))
    ex = Exporter(emu, session)
    await ex.source.start()
    try:
        await ex.until(lambda: ex.source.synced)
        emu.update_spec("ns-a", "u1", spec(2))
        emu.update_spec("ns-a", "u1", spec(3, key="Bad Key"))
        key = ("zaroz_unitsignal_generation_lag",
               frozenset({("namespace", "ns-a"), ("unitsignal", "u1"), ("workload", "wl-1")}))
        await ex.until(lambda: samples(ex.reg).get(key) == 2)
        s = samples(ex.reg)
        lbl = frozenset({("namespace", "ns-a"), ("unitsignal", "u1"), ("workload", "wl-1")})
        assert s[("zaroz_unitsignal_spec_valid", lbl)] == 0
        assert s[("zaroz_unitsignal_generation_stuck_invalid_spec", lbl)] == 1
        emu.patch_status("ns-a", "u1", {"observedGeneration": 2, "seq": 2})
        await ex.until(lambda: samples(ex.reg).get(key) == 1)
        observe = ("zaroz_unitsignal_generation_observe_seconds_count",
                   frozenset({("workload", "wl-1")}))
        assert samples(ex.reg)[observe] == 1
        assert b"4111-customer" not in render_bytes(ex.reg)
    finally:
        await ex.source.stop()


async def test_relist_after_410_drops_objects_deleted_while_away(emu, session):
    for i in range(20):
        emu.create("ns-a", f"u{i}", spec(1, f"k{i}"), labels=WL,
                   status=full_status(observedGeneration=1))
    ex = Exporter(emu, session)
    await ex.source.start()
    try:
        await ex.until(lambda: ex.source.synced and len(ex.model.objects) == 20)
        lists_before = emu.count("list")
        await ex.source.stop()  # disconnected: the reflector keeps its resourceVersion...
        for i in range(5):
            emu.delete("ns-a", f"u{i}")
        emu.compact()  # ...and the history it would resume from is gone
        await ex.source.start()
        await ex.until(lambda: len(ex.model.objects) == 15)
        assert emu.count("list") > lists_before
        s = samples(ex.reg)
        assert not [k for k in s if ("unitsignal", "u0") in k[1]]
        assert object_state(ex.reg) == reference(emu)
    finally:
        await ex.source.stop()


async def test_resumed_watch_replays_no_added_storm(emu, session):
    for i in range(30):
        emu.create("ns-a", f"u{i}", spec(1, f"k{i}"), labels=WL)
    ex = Exporter(emu, session)
    await ex.source.start()
    try:
        await ex.until(lambda: ex.source.synced)
        upserts = []
        orig = ex.model.upsert
        ex.model.upsert = lambda obj, now: (upserts.append(object_key(obj)[1]),  # type: ignore[method-assign]
                                            orig(obj, now))[1]
        emu.faults.cut_watch(after_events=1, times=2)
        emu.patch_status("ns-a", "u3", full_status(seq=5))
        emu.patch_status("ns-a", "u4", full_status(seq=5))
        emu.patch_status("ns-a", "u5", full_status(seq=5))
        await ex.until(lambda: {"u3", "u4", "u5"} <= set(upserts))
        await asyncio.sleep(0.3)
        assert sorted(upserts) == ["u3", "u4", "u5"]  # each change once, nothing else
        assert emu.count("list") == 5  # the initial 30 objects in pages of 7, never again
    finally:
        await ex.source.stop()


@pytest.mark.parametrize("seed", [1, 2])
async def test_every_fault_survived_with_nothing_lost_or_duplicated(emu, session, seed):
    rng = random.Random(seed)
    ex = Exporter(emu, session, namespaces=["ns-a", "ns-b"])
    for i in range(12):
        emu.create(rng.choice(["ns-a", "ns-b"]), f"u{i}", spec(1, f"k{i}"), labels=WL,
                   status=full_status(observedGeneration=1))
    f = emu.faults
    f.status(500, on="list")
    f.status(429, retry_after=0.1, on="list")
    f.drop(on="list", times=2)
    f.truncate(on="list")
    f.expire_continue()
    f.status(503, on="watch")
    f.truncate(on="watch", after_events=1)
    f.cut_watch(after_events=2, times=2)
    f.slow(0.3, 0.05, on="watch")
    f.expire_watch()
    await ex.source.start()
    try:
        gens = {}
        for step in range(60):
            live = [k.split("/") for k, _ in emu.store.items()]
            ns, name = rng.choice(live)
            roll = rng.random()
            if roll < 0.4:
                gens[name] = gens.get(name, 1) + 1
                emu.update_spec(ns, name, spec(gens[name], "k" + name[1:]))
            elif roll < 0.8:
                emu.patch_status(ns, name, {"seq": step + 2, "accepting": rng.random() < 0.5,
                                            "observedGeneration": gens.get(name, 1)})
            elif roll < 0.9 and len(live) > 3:
                emu.delete(ns, name)
            else:
                emu.create(rng.choice(["ns-a", "ns-b"]), f"n{step}", spec(1, f"n{step}"),
                           labels=WL)
            if step % 10 == 0:
                await asyncio.sleep(0.05)
        want = reference(emu)
        await ex.until(lambda: object_state(ex.reg) == want, timeout=20)
        assert len(f.applied) >= 8, f.applied
        fails = sum(v for (n, _), v in samples(ex.reg).items() if n == "zaroz_kube_failures_total")
        assert fails >= 5
    finally:
        await ex.source.stop()
