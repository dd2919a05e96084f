"""The simulated kernel and agents keep UnitSignals consistent with the event log."""

from __future__ import annotations

from exporter.sinks.metrics.family import Registry
from exporter.wiring.unitsignals import build_cluster
from tests.simlogs import finite_logs
from zaroz_sim.cluster import ClusterMirror
from zaroz_sim.kube.emulator import KubeEmulator


def test_mirror_follows_the_log_with_stuck_and_invalid_units():
    logs, truth = finite_logs(seed=5, workloads=2, seconds=400)
    kube = KubeEmulator(seed=1)
    mirror = ClusterMirror(kube, seed=1, p_stuck=0.2)
    reg = Registry()
    model, _ = build_cluster(reg)
    seen_lagging, seen_invalid = set(), set()
    for wl, evs in logs.items():
        for i in range(0, len(evs), 50):
            mirror.apply(wl, evs[i:i + 50])
            objs = [kube.get(*k.split("/")) for k, _ in kube.store.items()]
            model.replace(objs, 0.0)
            invalid_now = [t.state.workload for t in model.objects.values()
                           if not t.state.spec_valid]
            assert len(invalid_now) == len(set(invalid_now))  # one a workload at a time
            for key, t in model.objects.items():
                if t.state.generation_lag > 0:
                    seen_lagging.add(key)
                if not t.state.spec_valid:
                    seen_invalid.add(key)
    # Every unit is destroyed at the end of a finite log: every object is gone.
    assert list(kube.store.items()) == []
    assert len(seen_lagging) >= 2
    assert len(seen_invalid) > len(logs)  # another unit's spec is refused when one is gone
    assert sum(truth.startups.values()) > 10
