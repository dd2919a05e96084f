"""The model's status-only fast path gives exactly what the full path gives."""

from __future__ import annotations

import random
from typing import Any

import pytest

from exporter.model.observations import Recorder
from exporter.model.unitsignals import UnitSignalModel
from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.metrics.family import Registry
from exporter.wiring.unitsignals import build_cluster
from tests.unitsignals import T0, iso, status, unitsignal

NAMES = ("u1", "u2", "u3")


def writes(seed: int, n: int = 300) -> list[tuple[float, dict[str, Any]]]:
    """A history of API-server objects: mostly the agent's status writes (some invalid, some
    with seq going back), sometimes a spec write (metadata.generation bumped) or a label move."""
    rng = random.Random(seed)
    objs = {name: unitsignal(name, status_=status()) for name in NAMES}
    out = []
    now = T0
    for _ in range(n):
        now += rng.uniform(0.1, 5)
        obj = objs[rng.choice(NAMES)]
        st, spec, meta = obj["status"], obj["spec"], obj["metadata"]
        r = rng.random()
        if r < 0.08:  # the kernel writes the spec: a new generation, maybe an allocation
            spec["generation"] += 1
            meta["generation"] += 1
            spec["allocation"] = rng.choice((None, {"id": f"a{spec['generation']}",
                                                    "generation": spec["generation"],
                                                    "allocatedAt": iso(now - 1)}))
            spec["draining"] = rng.choice((False, False, "scale_down"))
        elif r < 0.12:
            meta["labels"]["units.zaroz.cloud/workload"] = rng.choice(("wl-1", "wl-2"))
        elif r < 0.14:
            meta["labels"]["team"] = rng.choice(("blue", "red"))
        else:  # the agent's status write
            st["seq"] = st["seq"] + 1 if rng.random() < 0.95 else 1
            field = rng.choice(("accepting", "activity", "agentVersion", "observedGeneration",
                                "signalledReady", "allocationAck", "bad", "extra", "none"))
            if field == "accepting":
                st["accepting"] = not st["accepting"]
            elif field == "activity":
                st["activity"] = rng.choice((None, "idle", "busy"))
            elif field == "agentVersion":
                st["agentVersion"] = rng.choice(("1.4.2", "1.5.0"))
            elif field == "observedGeneration":
                st["observedGeneration"] = spec["generation"] - rng.choice((0, 0, 1))
            elif field == "signalledReady":
                st["signalledReady"] = rng.choice((None, iso(now - 2)))
            elif field == "allocationAck":
                alloc = spec["allocation"]
                st["allocationAck"] = rng.choice((None, "nope", alloc and alloc["id"]))
            elif field == "bad":
                st["accepting"] = "yes"  # fails the schema
            elif field == "extra":  # a field the contract does not have: fails the schema
                if "extra" in st:
                    del st["extra"]
                else:
                    st["extra"] = 1
        written = {**obj, "metadata": {**meta, "labels": dict(meta["labels"])},
                   "spec": dict(spec), "status": dict(st)}
        if rng.random() < 0.02:  # the status written away (and back by the next write)
            del written["status"]
        out.append((now, written))
    return out


def run(history: list[tuple[float, dict[str, Any]]], fast: bool) -> tuple[list, bytes, int]:
    rec = Recorder()
    model = UnitSignalModel(rec, ("team",))
    model.status_fast_path = fast
    reg = Registry()
    shown, _ = build_cluster(reg, ("team",), clock=lambda: T0 + 10_000)
    shown.status_fast_path = fast
    hits = [0]
    full = shown._status_only

    def counted(*a: Any) -> None:
        hits[0] += 1
        full(*a)

    shown._status_only = counted  # type: ignore[method-assign]
    for now, obj in history:
        model.upsert(obj, now)
        shown.upsert(obj, now)
    states = [(k, t.state) for k, t in sorted(model.objects.items())]
    return [*rec.calls, *states], render_bytes(reg), hits[0]


@pytest.mark.parametrize("seed", range(25))
def test_status_fast_path_changes_nothing(seed):
    history = writes(seed)
    slow_calls, slow_text, slow_hits = run(history, fast=False)
    fast_calls, fast_text, fast_hits = run(history, fast=True)
    assert slow_hits == 0 and fast_hits > len(history) // 4  # the fast path was taken
    assert fast_calls == slow_calls
    assert fast_text == slow_text
