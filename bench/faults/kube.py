"""The cluster under the schedule: the project's Kubernetes API emulator (zaroz_sim.kube) holding
UnitSignals of the run's workloads, which a writer (the simulated kernel and agent) creates,
changes and deletes the whole run; the schedule deletes and re-creates the CRD, expires the
exporters' watches (410: a relist), and changes UnitSignals while an exporter is down. The truth
is the emulator's objects at the end: each UnitSignal's state gauges on the shard that owns its
workload, none on another."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from bench.faults.checker import Report
from bench.faults.scrapers import Key
from exporter.model.sharding import shard_of
from zaroz_sim.kube.emulator import KubeEmulator
from zaroz_sim.kube.faults import KubeFaults
from zaroz_sim.kube.store import KubeError

WORKLOAD_LABEL = "units.zaroz.cloud/workload"
NAMESPACES = ("team-a", "team-b")
DRAINS = ("stop", "destroy", "replace", "scale_down")
PER_WORKLOAD = 6  # UnitSignals a workload holds at most


def iso(t_s: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t_s, UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Want:
    """What the exporter must show of one UnitSignal."""

    workload: str
    lag: int
    ready: int
    accepting: int
    draining: str  # a reason, or "none"


class Cluster:
    """The emulator and the writer; every change is drawn from the run's seed."""

    def __init__(self, seed: int, workloads: list[str]) -> None:
        self.faults = KubeFaults()
        self.emu = KubeEmulator(seed=seed, bookmark_interval_s=0.5, faults=self.faults)
        self.rng = random.Random(seed ^ 0xC1)
        self.workloads = workloads
        self.serial = 0
        self.writes: Counter[str] = Counter()
        self.url = ""
        self.away = 0  # CRD deletions in force (windows overlap)

    async def start(self) -> str:
        self.url = await self.emu.start()
        for w in self.workloads:
            for _ in range(3):
                self._create(w)
        return self.url

    async def stop(self) -> None:
        await self.emu.stop()

    # -- the writer ------------------------------------------------------------------------------

    def _objects(self, workload: str | None = None) -> list[dict[str, Any]]:
        out = []
        for _, obj in self.emu.store.items():
            labels = obj["metadata"].get("labels") or {}
            if workload is None or labels.get(WORKLOAD_LABEL) == workload:
                out.append(obj)
        return out

    def _create(self, workload: str) -> None:
        self.serial += 1
        name = f"us-{self.serial}"
        spec = {"unitId": f"unit-{self.serial}", "key": name, "contractVersion": 1,
                "generation": 1, "userData": {}, "allocation": None, "draining": False}
        status = {"observedGeneration": self.rng.choice((0, 1)), "agentVersion": "1.4.2",
                  "signalledReady": None, "accepting": False, "activity": None,
                  "activitySince": None, "shutdownRequestedAt": None, "allocationAck": None,
                  "seq": 1}
        self.emu.create(self.rng.choice(NAMESPACES), name, spec,
                        labels={WORKLOAD_LABEL: workload}, status=status)
        self.writes["create"] += 1

    def step(self, workloads: list[str] | None = None) -> None:
        """One change: a UnitSignal created, its spec or status changed, or deleted; nothing
        while the CRD is away (the API server answers 404)."""
        if not self.emu.crd_installed:
            return
        w = self.rng.choice(workloads or self.workloads)
        objs = self._objects(w)
        op = self.rng.choices(("create", "spec", "status", "delete"), (2, 3, 4, 1))[0]
        if op == "create" or not objs:
            if len(objs) < PER_WORKLOAD:
                self._create(w)
            return
        obj = self.rng.choice(objs)
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            if op == "delete":
                self.emu.delete(ns, name)
            elif op == "spec":
                spec = dict(obj["spec"])
                spec["generation"] = int(spec["generation"]) + 1
                spec["draining"] = self.rng.choice((False, False, *DRAINS))
                self.emu.update_spec(ns, name, spec)
            else:
                gen = int(obj["spec"]["generation"])
                self.emu.patch_status(ns, name, {
                    "observedGeneration": self.rng.choice((gen, gen, max(0, gen - 1))),
                    "signalledReady": self.rng.choice((None, iso(1_780_000_000.0))),
                    "accepting": self.rng.random() < 0.5})
        except KubeError:
            return
        self.writes[op] += 1

    # -- the schedule's faults -------------------------------------------------------------------

    async def crd_window(self, seconds: float) -> None:
        """The CRD deleted for `seconds` (with every UnitSignal), then created again."""
        self.away += 1
        if self.emu.crd_installed:
            self.emu.uninstall_crd()
        try:
            await asyncio.sleep(seconds)
        finally:
            self.away -= 1
            if not self.away:
                self.install_crd()

    def install_crd(self) -> None:
        """The CRD back, empty; the kernel re-creates its UnitSignals."""
        if not self.emu.crd_installed:
            self.emu.install_crd()
            for w in self.workloads:
                for _ in range(self.rng.randint(1, 3)):
                    self._create(w)

    def expire_watches(self, exporters: int) -> None:
        """The next watch of each exporter answered 410 Gone (its resourceVersion expired)."""
        self.faults.expire_watch(times=max(1, exporters))

    def heal(self) -> None:
        self.faults.clear()
        self.away = 0
        self.install_crd()

    # -- the truth -------------------------------------------------------------------------------

    def truth(self) -> dict[tuple[str, str], Want]:
        out = {}
        for obj in self._objects():
            meta, spec, status = obj["metadata"], obj["spec"], obj.get("status") or {}
            drain = spec.get("draining")
            out[(meta["namespace"], meta["name"])] = Want(
                workload=meta["labels"][WORKLOAD_LABEL],
                lag=int(spec["generation"]) - int(status.get("observedGeneration") or 0),
                ready=int(status.get("signalledReady") is not None),
                accepting=int(bool(status.get("accepting"))),
                draining=drain if isinstance(drain, str) else "none")
        return out


def shown(samples: dict[Key, float]) -> dict[tuple[str, str], dict[str, Any]]:
    """What one exporter shows of each UnitSignal (its state gauges)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for (name, labels), v in samples.items():
        if not name.startswith("zaroz_unitsignal_"):
            continue
        lab = dict(labels)
        if "unitsignal" not in lab:
            continue
        row = out.setdefault((lab["namespace"], lab["unitsignal"]), {})
        short = name.removeprefix("zaroz_unitsignal_")
        if short == "info":
            row["workload"] = lab["workload"]
        elif short == "draining":
            if v == 1:
                row["draining"] = lab["reason"]
            else:
                row.setdefault("draining", "none")
        elif short in ("generation_lag", "ready", "accepting"):
            row[short] = v
    return out


def check(report: Report, scrapes: dict[int, dict[Key, float]], truth: dict[tuple[str, str], Want],
          shards: int) -> None:
    """Every UnitSignal on the shard that owns its workload, with the truth's state, and on no
    other shard; nothing shown that the cluster no longer holds."""
    for index, samples in scrapes.items():
        got = shown(samples)
        mine = {k: w for k, w in truth.items() if shard_of(w.workload, shards) == index}
        extra = sorted(set(got) - set(mine))
        missing = sorted(set(mine) - set(got))
        report.check(not extra, f"shard {index}/{shards} shows UnitSignals it does not own or "
                                f"the cluster no longer holds: {extra[:8]}")
        report.check(not missing, f"shard {index}/{shards} misses UnitSignals: {missing[:8]}")
        for key, want in mine.items():
            row = got.get(key)
            if row is None:
                continue
            have = Want(workload=row.get("workload", "?"), lag=int(row.get("generation_lag", -1)),
                        ready=int(row.get("ready", -1)), accepting=int(row.get("accepting", -1)),
                        draining=row.get("draining", "?"))
            report.check(have == want, f"UnitSignal {key[0]}/{key[1]} on shard {index}: "
                                       f"{have} != {want}")
