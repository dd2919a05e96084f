"""Every object the simulated kernel and agents write is one a real API server would keep: each
version of each UnitSignal validates against deploy/'s CRD, statuses lack what the agent
patched to null (RFC 7386) as real ones do, and the specs the agents refuse are specs the CRD
admits (the contract is stricter than the CRD)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from exporter.contract import is_valid_unit_signal_spec, is_valid_unit_signal_status
from tests.simlogs import finite_logs
from tests.test_deploy_build import _as_jsonschema
from zaroz_sim.cluster import WORKLOAD_LABEL, ClusterMirror
from zaroz_sim.kube.emulator import KubeEmulator
from zaroz_sim.kube.store import Event

CRD = Path(__file__).resolve().parent.parent / "deploy" / "overlays" / "dev" / "crd.yaml"


def crd_validator() -> jsonschema.Validator:
    """The CRD's schema read as the API server reads it (tests/test_deploy_build's reading, not
    the emulator's own), date-time formats checked."""
    (version,) = yaml.safe_load(CRD.read_text())["spec"]["versions"]
    schema = _as_jsonschema(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


@pytest.fixture(scope="module")
def written() -> tuple[list[Event], ClusterMirror]:
    """Every write of ten simulated minutes of two workloads, with stuck agents and refused
    specs, and an operator's fix half-way."""
    logs, _ = finite_logs(seed=11, workloads=2, seconds=600, rate=0.6)
    kube = KubeEmulator(seed=2)
    events: list[Event] = []
    kube.store.listeners.add(events.append)
    mirror = ClusterMirror(kube, seed=2, p_stuck=0.2)
    for wl, evs in logs.items():
        half = len(evs) // 2
        for i in range(0, half, 40):
            mirror.apply(wl, evs[i:min(i + 40, half)])
    mirror.recover()
    for wl, evs in logs.items():
        for i in range(len(evs) // 2, len(evs), 40):
            mirror.apply(wl, evs[i:i + 40])
    return events, mirror


def test_every_version_of_every_object_validates_against_the_crd(written):
    events, mirror = written
    assert not mirror.refused  # the emulator's own validation refused nothing either
    assert {e.type for e in events} == {"ADDED", "MODIFIED", "DELETED"}
    assert len({e.key for e in events}) > 50 and len(events) > 1000
    crd = crd_validator()
    bad = [f"{e.key}@{e.rv}: {'.'.join(map(str, err.absolute_path))}: {err.message}"
           for e in events for err in crd.iter_errors(e.obj)]
    assert bad == []


def test_statuses_lack_what_was_patched_to_null_and_read_as_valid(written):
    events, _ = written
    statuses = [e.obj["status"] for e in events if "status" in e.obj]
    assert statuses
    assert not [s for s in statuses if None in s.values()]  # null deletes: none is kept
    lacking = [s for s in statuses if "activity" not in s or "shutdownRequestedAt" not in s]
    assert len(lacking) > len(statuses) // 2  # most statuses lack some nulled field
    # The exporter reads an absent field as null: each of them is a valid status to it.
    assert all(is_valid_unit_signal_status(s | {k: None for k in (
        "signalledReady", "activity", "activitySince", "shutdownRequestedAt", "allocationAck")
        if k not in s}) for s in statuses)
    # A generation is acknowledged without a spec write: status writes never bump it.
    for e in events:
        if e.type == "MODIFIED" and e.prev is not None and e.obj["spec"] == e.prev["spec"]:
            assert e.obj["metadata"]["generation"] == e.prev["metadata"]["generation"]


def test_the_specs_agents_refuse_are_admitted_by_the_api_server(written):
    events, _ = written
    crd = crd_validator()
    refused = [e for e in events if e.type != "DELETED"
               and not is_valid_unit_signal_spec(e.obj["spec"])]
    assert len({e.key for e in refused}) >= 2  # more than one unit, over both workloads
    for e in refused:
        assert crd.is_valid(e.obj)
        assert WORKLOAD_LABEL in e.obj["spec"]["labels"]  # a label key with a "/"
    # Every refused spec was fixed or its unit went: the last version of each object is valid.
    last: dict[str, Any] = {}
    for e in events:
        last[e.key] = e
    assert all(e.type == "DELETED" for e in last.values())  # a finite log ends every unit


def test_specs_are_written_by_patch_and_by_update(written):
    events, _ = written
    spec_writes = [e for e in events if e.type == "MODIFIED" and e.prev is not None
                   and e.obj["spec"] != e.prev["spec"]]
    assert spec_writes
    assert all(e.obj["metadata"]["generation"] == e.prev["metadata"]["generation"] + 1
               for e in spec_writes if e.prev is not None)
    # A merge patch with a null deletes: a spec whose allocation was withdrawn lacks it.
    assert any("allocation" in e.prev["spec"] and "allocation" not in e.obj["spec"]
               for e in spec_writes if e.prev is not None)
    # An update replaces the spec: the fix of a refused spec drops the label a patch added.
    assert any(WORKLOAD_LABEL in (e.prev["spec"].get("labels") or {})
               and WORKLOAD_LABEL not in (e.obj["spec"].get("labels") or {})
               for e in spec_writes if e.prev is not None)
    managers = {m["manager"] for e in events for m in e.obj["metadata"]["managedFields"]}
    assert managers == {"kernel", "zaroz-agent"}


def test_an_agent_refuses_a_spec_broken_by_someone_else_until_it_is_fixed():
    """What `kubectl patch` does to a live unit: its agent reads the stored spec, refuses it
    (a label key the contract forbids), keeps the generation it had; a fix is acknowledged."""
    logs, _ = finite_logs(seed=3, workloads=1, seconds=900, rate=0.3)
    ((wl, evs),) = logs.items()
    kube = KubeEmulator(seed=3)
    mirror = ClusterMirror(kube, seed=3, p_stuck=0.0, invalid_spec_workloads=())
    # a unit whose allocations the agent acknowledges, several times
    acks = [e["unit"]["id"] for e in evs if e["type"] == "unit.allocation_delivered"]
    unit = max(set(acks), key=acks.count)
    assert acks.count(unit) >= 3
    at = [i for i, e in enumerate(evs) if e["type"] == "unit.allocation_delivered"
          and e["unit"]["id"] == unit]
    mirror.apply(wl, evs[:at[0] + 1])
    u = mirror.units[unit]

    def stored() -> dict[str, Any]:
        return kube.get(u.namespace, u.name)

    obj = stored()
    assert obj["status"]["observedGeneration"] == obj["spec"]["generation"]
    broken = obj["spec"]["generation"] + 1
    kube.patch_object(u.namespace, u.name, {"spec": {"generation": broken,
                                                     "labels": {"Not A Label Key": "x"}}},
                      "merge", manager="kubectl-patch")
    mirror.apply(wl, evs[at[0] + 1:at[1] + 1])  # the kernel writes again, the agent acks
    obj = stored()
    assert obj["spec"]["generation"] > broken  # the kernel's write came after, on top
    assert "Not A Label Key" in obj["spec"]["labels"]  # a merge patch keeps what it omits
    assert obj["status"]["observedGeneration"] < broken  # refused: never observed
    kube.patch_object(u.namespace, u.name, {"spec": {"generation": obj["spec"]["generation"] + 1,
                                                     "labels": {"Not A Label Key": None}}},
                      "merge", manager="kubectl-patch")
    mirror.apply(wl, evs[at[1] + 1:at[2] + 1])
    obj = stored()
    assert obj["status"]["observedGeneration"] == obj["spec"]["generation"]  # fixed: acked
    assert not mirror.refused


def test_the_agent_checks_formats_as_the_exporter_does():
    """An allocation stamped with a time that is no RFC 3339 date-time (a hand-made patch) is
    refused by the simulated agent, as the exporter counts it invalid: the two never disagree."""
    from zaroz_sim.cluster import agent_accepts

    spec = {"unitId": "u1", "key": "k", "contractVersion": 1, "generation": 2,
            "allocation": {"id": "a1", "generation": 2, "allocatedAt": "2026-12-01T10:00:00Z"}}
    bad = {**spec, "allocation": {**spec["allocation"], "allocatedAt": "yesterday"}}
    assert agent_accepts()(spec) and is_valid_unit_signal_spec(spec)
    assert not agent_accepts()(bad) and not is_valid_unit_signal_spec(bad)
