"""The simulated kernel and agents: UnitSignals in the Kubernetes emulator, kept consistent with
the simulator's event log.

Each unit's events become the writes the platform would make, through the emulator's write path
(what a real API server does: validated against the CRD, 422 when refused): the kernel creates
the object and writes the spec (a new `spec.generation` per change) by merge patch, or by update
when it replaces it; the agent writes the status by JSON merge patch through the `status`
subresource, so a field it patches to null is deleted, as on a real server. Some agents stop
acknowledging (stuck generations) and one unit of each workload at a time gets a spec its agent
refuses, so the demo shows what the alerts are for: one the API server admits (the CRD cannot
check label keys), so it is refused by the agent, not by the server.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema_rs

from zaroz_sim.kube.emulator import KubeEmulator
from zaroz_sim.kube.store import API_VERSION, KIND, KubeError

log = logging.getLogger(__name__)

WORKLOAD_LABEL = "units.zaroz.cloud/workload"
# unit-signal-spec.schema.json's label names: event labels such as the workload label don't fit.
_SPEC_LABEL = re.compile(r"[a-z0-9]([a-z0-9_.-]*[a-z0-9])?")
AGENT_VERSION = "1.4.2"
KERNEL, AGENT = "kernel", "zaroz-agent"  # field managers
_SPEC_SCHEMA = "unit-signal-spec.schema.json"
_SCHEMA_PATHS = (Path(__file__).resolve().parent / _SPEC_SCHEMA,  # where the wheel ships it
                 Path(__file__).resolve().parent.parent / "schemas" / _SPEC_SCHEMA)


@functools.cache
def agent_accepts() -> Callable[[Any], bool]:
    """The agent's check of a spec it reads: the contract's schema (stricter than the CRD)."""
    path = next(p for p in _SCHEMA_PATHS if p.exists())
    return jsonschema_rs.validator_for(json.loads(path.read_text(encoding="utf-8")),
                                       validate_formats=True).is_valid  # as the exporter checks


@dataclass
class _Unit:
    namespace: str
    name: str
    spec: dict[str, Any]
    observed: int = 0
    seq: int = 0
    stuck: bool = False  # the agent stops acknowledging new generations
    invalid: bool = False  # the kernel wrote a spec that fails the contract
    valid_labels: dict[str, str] = field(default_factory=dict)  # the labels before it did
    status: dict[str, Any] = field(default_factory=dict)


def _status() -> dict[str, Any]:
    return {
        "observedGeneration": 1, "agentVersion": AGENT_VERSION, "signalledReady": None,
        "accepting": False, "activity": None, "activitySince": None,
        "shutdownRequestedAt": None, "allocationAck": None, "seq": 0,
    }


class ClusterMirror:
    """Applies a workload's envelopes to UnitSignals; call `apply` with each new batch.

    Scenario knobs: `p_stuck` of agents (any workload) stop acknowledging; every agent of
    `stuck_workloads` does; one unit of each of `invalid_spec_workloads` (default: every
    workload) gets an invalid spec. `recover()` ends both, as an operator's fix would.
    """

    def __init__(self, kube: KubeEmulator, *, seed: int = 1, p_stuck: float = 0.05,
                 stuck_workloads: Iterable[str] = (),
                 invalid_spec_workloads: Iterable[str] | None = None) -> None:
        self.kube = kube
        self.rng = random.Random(seed)
        self.p_stuck = p_stuck
        self.stuck_workloads = frozenset(stuck_workloads)
        self.invalid_spec_workloads = (
            None if invalid_spec_workloads is None else frozenset(invalid_spec_workloads)
        )
        self.units: dict[str, _Unit] = {}
        self.invalid_done: set[str] = set()
        self.recovered = False
        self.refused: Counter[str] = Counter()  # writes the API server refused, by its reason

    def recover(self) -> int:
        """Restart the stuck agents (they observe the current generation) and write a valid
        spec over each invalid one (a new generation, observed); no new faults after this.
        Returns the UnitSignals fixed."""
        self.recovered = True
        fixed = 0
        for u in list(self.units.values()):
            if u.invalid:
                u.invalid = False
                u.spec = dict(u.spec, labels=u.valid_labels)
                self._update_spec(u)
            elif not u.stuck:
                continue
            u.stuck = False
            self._status(u, {}, observe=True)
            fixed += 1
        return fixed

    def apply(self, workload: str, envelopes: list[dict[str, Any]]) -> None:
        for ev in envelopes:
            unit = ev.get("unit")
            if type(unit) is not dict:
                continue
            handler = getattr(self, "_" + ev["type"].replace("unit.", "").replace(".", "_"), None)
            if handler is None:
                continue
            u = self.units.get(unit["id"])
            if u is None and ev["type"] != "unit.created":
                continue
            try:
                handler(workload, unit, u, ev)
            except KubeError as e:  # refused by the API server (or the CRD is not installed)
                self.refused[e.reason] += 1
                log.debug("write refused", extra={"reason": e.reason, "error": e.message})
            except Exception:  # a simulation glitch must not stop the demo
                continue

    # -- the kernel's spec writes and the agent's status writes ------------------------------

    def _created(self, workload: str, unit: dict[str, Any], u: _Unit | None,
                 ev: dict[str, Any]) -> None:
        ns = f"zaroz-{workload}"
        name = f"{unit['key']}"[:40]
        spec = {"unitId": unit["id"], "key": unit["key"], "contractVersion": 1, "generation": 1,
                "labels": {k: v for k, v in (unit.get("labels") or {}).items()
                           if _SPEC_LABEL.fullmatch(k)},
                "userData": {"level": "demo"},
                "allocation": None, "draining": False}
        stuck = self.rng.random() < self.p_stuck or workload in self.stuck_workloads
        u = _Unit(ns, name, spec, stuck=stuck and not self.recovered)
        self.units[unit["id"]] = u
        self.kube.create_object(ns, {
            "apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": name, "labels": {WORKLOAD_LABEL: workload}}, "spec": spec,
        }, manager=KERNEL)

    def _starting(self, workload: str, unit: dict[str, Any], u: _Unit,
                  ev: dict[str, Any]) -> None:
        u.status = {}
        self._status(u, _status())

    def _ready(self, workload: str, unit: dict[str, Any], u: _Unit, ev: dict[str, Any]) -> None:
        self._status(u, {"signalledReady": ev["occurred_at"]})

    def _accepting(self, workload: str, unit: dict[str, Any], u: _Unit,
                   ev: dict[str, Any]) -> None:
        self._status(u, {"accepting": True})

    def _not_accepting(self, workload: str, unit: dict[str, Any], u: _Unit,
                       ev: dict[str, Any]) -> None:
        self._status(u, {"accepting": False})

    def _idle(self, workload: str, unit: dict[str, Any], u: _Unit, ev: dict[str, Any]) -> None:
        self._status(u, {"activity": "idle", "activitySince": ev["occurred_at"]})

    def _busy(self, workload: str, unit: dict[str, Any], u: _Unit, ev: dict[str, Any]) -> None:
        self._status(u, {"activity": "busy", "activitySince": ev["occurred_at"]})

    def _allocated(self, workload: str, unit: dict[str, Any], u: _Unit,
                   ev: dict[str, Any]) -> None:
        alloc_id = f"alloc-{ev['seq']}"
        self._spec(workload, u, allocation={"id": alloc_id, "generation": 0,
                                            "allocatedAt": ev["occurred_at"]})

    def _allocation_delivered(self, workload: str, unit: dict[str, Any], u: _Unit,
                              ev: dict[str, Any]) -> None:
        alloc = u.spec.get("allocation")
        if alloc:
            self._status(u, {"allocationAck": alloc["id"]}, observe=True)

    def _allocation_undelivered(self, workload: str, unit: dict[str, Any], u: _Unit,
                                ev: dict[str, Any]) -> None:
        self._spec(workload, u, allocation=None)
        self._status(u, {}, observe=True)

    def _draining(self, workload: str, unit: dict[str, Any], u: _Unit,
                  ev: dict[str, Any]) -> None:
        reason = ev.get("data", {}).get("reason")
        reason = reason if reason in ("stop", "destroy", "replace", "scale_down") else "stop"
        self._spec(workload, u, draining=reason)
        self._status(u, {"shutdownRequestedAt": ev["occurred_at"]}, observe=True)

    def _exited(self, workload: str, unit: dict[str, Any], u: _Unit, ev: dict[str, Any]) -> None:
        if ev.get("data", {}).get("restarted"):
            u.seq = 0  # a new agent process: status.seq starts again
            self._status(u, {"signalledReady": None, "accepting": False, "activity": None})

    def _destroyed(self, workload: str, unit: dict[str, Any], u: _Unit,
                   ev: dict[str, Any]) -> None:
        self.units.pop(unit["id"], None)
        if u.invalid:  # the next unit of the workload to change its spec gets one
            self.invalid_done.discard(workload)
        self.kube.delete_object(u.namespace, u.name)

    # -- helpers ---------------------------------------------------------------------------

    def _spec(self, workload: str, u: _Unit, **changes: Any) -> None:
        """A merge patch of what changed (a null deletes the field: `allocation` when none),
        one generation after the object's (someone else, kubectl, may have written it)."""
        u.spec = dict(u.spec, **changes)
        u.spec["generation"] = self._generation(u) + 1
        if isinstance(u.spec.get("allocation"), dict):
            u.spec["allocation"] = dict(u.spec["allocation"], generation=u.spec["generation"])
        patch = {k: u.spec[k] for k in changes} | {"generation": u.spec["generation"]}
        if self._invalid_next(workload) and u.spec["generation"] >= 3:
            # One unit a workload gets a spec its agent refuses and the API server admits: the
            # kernel copied the platform's workload label into spec.labels, whose keys the
            # contract restricts (no "/") and a CRD cannot check.
            self.invalid_done.add(workload)
            u.invalid = True
            u.valid_labels = dict(u.spec.get("labels") or {})
            u.spec["labels"] = dict(u.valid_labels, **{WORKLOAD_LABEL: workload})
            patch["labels"] = {WORKLOAD_LABEL: workload}
        self.kube.patch_object(u.namespace, u.name, {"spec": patch}, "merge", manager=KERNEL)

    def _update_spec(self, u: _Unit) -> None:
        """An update (PUT) of the whole object with the spec replaced, at its current
        resourceVersion: what a kernel that rewrites a spec does."""
        obj = self.kube.get(u.namespace, u.name)
        u.spec["generation"] = obj["spec"]["generation"] + 1
        obj["spec"] = dict(u.spec)
        self.kube.update_object(u.namespace, u.name, obj, manager=KERNEL)

    def _stored_spec(self, u: _Unit) -> dict[str, Any]:
        """The object's spec as the API server holds it now (read, never changed: the store
        keeps each version as written), whoever wrote it last."""
        obj = self.kube.store.objects.get(f"{u.namespace}/{u.name}")
        if obj is None:
            raise KubeError(404, "NotFound", f"unitsignal {u.namespace}/{u.name} not found")
        spec: dict[str, Any] = obj.get("spec") or {}
        return spec

    def _generation(self, u: _Unit) -> int:
        generation = self._stored_spec(u).get("generation")
        return generation if type(generation) is int else int(u.spec["generation"])

    def _invalid_next(self, workload: str) -> bool:
        return not self.recovered and workload not in self.invalid_done and (
            self.invalid_spec_workloads is None or workload in self.invalid_spec_workloads
        )

    def _status(self, u: _Unit, changes: dict[str, Any], observe: bool = False) -> None:
        if not u.status:
            changes = dict(_status(), **changes)  # the agent's first write sets every field
        u.seq += 1
        patch = dict(changes, seq=u.seq)
        if observe and not u.stuck:
            # The agent acknowledges the spec it reads, if it accepts it: one the kernel (or
            # a `kubectl patch`) broke keeps the previous generation, never observed.
            spec = self._stored_spec(u)
            if agent_accepts()(spec):
                patch["observedGeneration"] = spec["generation"]
        u.status.update(patch)
        self.kube.patch_object(u.namespace, u.name, {"status": patch}, "merge",
                               subresource="status", manager=AGENT)
