"""Deterministic, streaming generator of the platform's event log, with its ground truth.

Pure: no I/O and no wall clock. Each unit's timeline is planned when the unit is created; a
workload's events wait in a heap ordered by true time and get their seq when released. Every
random stream is keyed by (seed, workload, unit), so how the caller slices time into
`events_until` calls never changes the log.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from dataclasses import dataclass, field
from typing import Any

from zaroz_sim.config import LogNormal, SimConfig, Workload
from zaroz_sim.timefmt import floor_ns, random_form, render
from zaroz_sim.truth import Truth
from zaroz_sim.unitplan import Planned, extras, plan_unit

__all__ = ["LogNormal", "SimConfig", "Simulator", "Truth", "Workload"]

_NS = 1_000_000_000
_SCALE_REASONS = ("autoscaler", "manual", "schedule", "budget")

_HeapItem = tuple[int, int, int, Planned]  # (log_ns, unit index or -1, step, event)


@dataclass
class _WorkloadState:
    wl: Workload
    config: SimConfig  # with the workload's overrides
    instances: tuple[str, ...]
    arrivals: random.Random
    scaling: random.Random
    next_arrival_ns: int
    next_scale_ns: int
    units: int = 0
    scales: int = 0
    desired: int = 0
    seq: int = 0
    heap: list[_HeapItem] = field(default_factory=list)


class Simulator:
    """Streams per-workload envelopes in seq order; `truth` covers what was emitted so far."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.workloads = config.workload_list()
        self.truth = Truth()
        self._stop_creating_at: int | None = None
        self._states = {wl.id: self._new_state(wl) for wl in self.workloads}

    def _new_state(self, wl: Workload) -> _WorkloadState:
        cfg = self.config.for_workload(wl.id)
        seed = f"{cfg.seed}:{wl.id}"
        ids = random.Random(f"{seed}:instances")
        instances = tuple(f"platform-{ids.getrandbits(32):08x}" for _ in range(2))
        state = _WorkloadState(
            wl,
            cfg,
            instances,
            random.Random(f"{seed}:arrivals"),
            random.Random(f"{seed}:scaling"),
            next_arrival_ns=0,
            next_scale_ns=cfg.start_ns,  # the log opens with the initial units.scaled
        )
        state.next_arrival_ns = cfg.start_ns + self._gap(state.arrivals, cfg.arrival_rate)
        return state

    @staticmethod
    def _gap(rng: random.Random, rate: float) -> int:
        return max(1, int(rng.expovariate(rate) * _NS)) if rate > 0 else 1 << 62

    # -- public API ------------------------------------------------------------------------------

    def events_until(self, t_ns: int) -> dict[str, list[dict[str, Any]]]:
        """All new envelopes, per workload, whose log position is at or before t_ns."""
        out: dict[str, list[dict[str, Any]]] = {}
        for state in self._states.values():
            limit = t_ns if self._stop_creating_at is None else min(t_ns, self._stop_creating_at)
            self._create(state, limit)
            out[state.wl.id] = self._release(state, t_ns)
        return out

    def finish(self, stop_creating_at_ns: int) -> dict[str, list[dict[str, Any]]]:
        """Stop creating units after stop_creating_at_ns and return every remaining event."""
        if self._stop_creating_at is None:
            self._stop_creating_at = stop_creating_at_ns
        out: dict[str, list[dict[str, Any]]] = {}
        for state in self._states.values():
            self._create(state, self._stop_creating_at)
            out[state.wl.id] = self._release(state, None)
        return out

    # -- internals -------------------------------------------------------------------------------

    def _create(self, state: _WorkloadState, limit_ns: int) -> None:
        """Plan units and scale events whose creation time is at or before limit_ns."""
        cfg = state.config
        while state.next_arrival_ns <= limit_ns:
            state.units += 1
            for step, ev in enumerate(plan_unit(cfg, state.wl, state.units, state.next_arrival_ns)):
                heapq.heappush(state.heap, (ev.log_ns, state.units, step, ev))
            state.next_arrival_ns += self._gap(state.arrivals, cfg.arrival_rate)
        while state.next_scale_ns <= limit_ns:
            state.scales += 1
            ev = self._scale_event(state, state.next_scale_ns)
            heapq.heappush(state.heap, (ev.log_ns, -1, state.scales, ev))
            state.next_scale_ns += self._gap(state.scaling, cfg.scale_rate)

    def _scale_event(self, state: _WorkloadState, t_ns: int) -> Planned:
        rng = state.scaling
        before = state.desired
        if state.scales == 1:
            after, reason = rng.randint(3, 12), "initial"
        else:
            after, reason = max(0, before + rng.choice([-3, -2, -1, 1, 2, 3])), "autoscaler"
            reason = rng.choice(_SCALE_REASONS) if rng.random() < 0.3 else reason
        state.desired = after
        form = random_form(rng)
        data: dict[str, Any] = {"from": before, "to": after, "reason": reason}
        extra = extras(rng, state.config.p_unknown_fields, data)
        return Planned(t_ns, "units.scaled", floor_ns(t_ns, form.digits), form, None, data, extra)

    def _release(self, state: _WorkloadState, t_ns: int | None) -> list[dict[str, Any]]:
        out = []
        heap = state.heap
        while heap and (t_ns is None or heap[0][0] <= t_ns):
            _, unit_index, _, ev = heapq.heappop(heap)
            state.seq += 1
            envelope = self._envelope(state, ev, unit_index)
            self.truth.record(state.wl.id, envelope, ev.effects)
            out.append(envelope)
        return out

    def _envelope(self, state: _WorkloadState, ev: Planned, unit_index: int) -> dict[str, Any]:
        digest = hashlib.blake2b(
            f"{self.config.seed}:{state.wl.id}:{state.seq}".encode(), digest_size=16
        ).hexdigest()
        instance = state.instances[0 if unit_index < 0 else unit_index % len(state.instances)]
        envelope: dict[str, Any] = {
            "seq": state.seq,
            "id": f"evt_{digest}",
            "type": ev.type,
            "contract_version": 1,
            "occurred_at": render(ev.occurred_ns, ev.form),
            "service_instance_id": instance,
            "unit": None if ev.unit is None else _copy_unit(ev.unit),
            "data": dict(ev.data),
        }
        envelope.update(ev.extra)
        return envelope


def _copy_unit(unit: dict[str, Any]) -> dict[str, Any]:
    return {"id": unit["id"], "key": unit["key"], "labels": dict(unit["labels"])}
