"""The simulator's scenario knobs for incidents: one workload's config overridden (an
allocation-delivery failure burst, slow readiness), agents of a workload stuck, an invalid spec
in chosen workloads, and the fix (`ClusterMirror.recover`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

from exporter.sinks.metrics.family import Registry
from exporter.wiring.unitsignals import build_cluster
from zaroz_sim.cluster import ClusterMirror
from zaroz_sim.kube.emulator import KubeEmulator
from zaroz_sim.scenario import LogNormal, SimConfig, Simulator

S = 1_000_000_000


def _log(cfg: SimConfig, seconds: int) -> dict[str, list[dict[str, Any]]]:
    sim = Simulator(cfg)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for wl, evs in sim.events_until(cfg.start_ns + seconds * S).items():
        out[wl].extend(evs)
    return dict(out)


def test_workload_overrides_change_only_that_workload() -> None:
    cfg = SimConfig(seed=3, workloads=2, arrival_rate=0.5, p_undelivered=0.0,
                    workload_overrides={"wl-2": {"p_undelivered": 0.9,
                                                 "readiness": LogNormal(150.0, 0.1)}})
    log = _log(cfg, 900)
    types = {wl: Counter(e["type"] for e in evs) for wl, evs in log.items()}
    assert types["wl-1"]["unit.allocation_undelivered"] == 0
    assert types["wl-1"]["unit.allocation_delivered"] > 20
    assert types["wl-2"]["unit.allocation_undelivered"] > 3 * types["wl-2"][
        "unit.allocation_delivered"]
    # The other workload's log is the one it has without the override (same seed streams).
    plain = _log(SimConfig(seed=3, workloads=2, arrival_rate=0.5, p_undelivered=0.0), 900)
    assert plain["wl-1"] == log["wl-1"]


def test_workload_overrides_refuse_unknown_knobs() -> None:
    with pytest.raises(ValueError, match="wl-1"):
        SimConfig(workload_overrides={"wl-1": {"no_such_knob": 1}})


def _states(kube: KubeEmulator) -> dict[str, Any]:
    reg = Registry()
    model, _ = build_cluster(reg)
    model.replace([kube.get(*k.split("/")) for k, _ in kube.store.items()], 0.0)
    return {key: t.state for key, t in model.objects.items()}


def test_stuck_workload_invalid_spec_and_recover() -> None:
    cfg = SimConfig(seed=4, workloads=3, arrival_rate=0.1, p_undelivered=0.0,
                    p_crash_restart=0.0, lifetime=LogNormal(5000.0, 0.1))
    kube = KubeEmulator(seed=1)
    mirror = ClusterMirror(kube, seed=1, p_stuck=0.0, stuck_workloads={"wl-1"},
                           invalid_spec_workloads={"wl-2"})
    sim = Simulator(cfg)
    for wl, evs in sim.events_until(cfg.start_ns + 200 * S).items():
        mirror.apply(wl, evs)
    states = _states(kube)
    by_wl: dict[str, list[Any]] = defaultdict(list)
    for key, st in states.items():
        by_wl[key[0].removeprefix("zaroz-")].append(st)
    lagging = {wl: sum(s.generation_lag > 0 for s in sts) for wl, sts in by_wl.items()}
    invalid = {wl: sum(not s.spec_valid for s in sts) for wl, sts in by_wl.items()}
    assert lagging["wl-1"] >= 5 and lagging["wl-3"] == 0
    assert invalid == {"wl-1": 0, "wl-2": 1, "wl-3": 0}
    assert lagging["wl-2"] == 1  # the invalid spec is refused: its generation waits

    fixed = mirror.recover()
    assert fixed == len(by_wl["wl-1"]) + 1  # every agent of wl-1, and the invalid spec
    states = _states(kube)
    assert all(s.generation_lag == 0 and s.spec_valid for s in states.values())
    # After the fix new units are healthy too.
    for wl, evs in sim.events_until(cfg.start_ns + 300 * S).items():
        mirror.apply(wl, evs)
    after = _states(kube)
    assert len(after) > len(states)
    assert all(s.spec_valid for s in after.values())
    # Healthy agents: only units created so recently that no agent has written a status yet
    # lag (observedGeneration counts as 0).
    for key, st in after.items():
        if st.generation_lag > 0:
            assert not kube.get(*key).get("status"), key
