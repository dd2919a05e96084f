"""A production-shaped fleet for the events route: many long-lived units, then a steady stream.

The simulator (scenario.py) plans every unit's whole life, which is right for accuracy tests but
makes 100,000 units that live for hours slow to build and heavy to hold. Here the backlog is a
pure function of (workload, seq): every unit of a workload was created, started, became ready,
accepting and idle within the last `span_s` seconds before the fleet's start, so the route can
serve any page of it without storing it. After that, `LiveFleet.tick` produces a steady rate of
the events of platform.md's lifecycle on random live units (allocations and their acks, busy and
idle, accepting toggles, drains that end in unit.stopped and unit.destroyed, and a new unit
created for each that leaves), every interval ending after it started, so nothing reads as clock
skew. Deterministic for a seed and the sequence of tick times.
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from zaroz_sim.config import Workload
from zaroz_sim.route import RouteServer, _Log

_S = 1_000_000_000
_MS = 1_000_000
# The backlog of one unit: (type, ns after its creation, data).
_BACKLOG_STEPS: tuple[tuple[str, int, dict[str, Any]], ...] = (
    ("unit.created", 0, {}),
    ("unit.starting", 300 * _MS, {}),
    ("unit.ready", 6 * _S, {}),
    ("unit.accepting", 6 * _S + 100 * _MS, {}),
    ("unit.idle", 6 * _S + 200 * _MS, {}),
)
STEPS = len(_BACKLOG_STEPS)
WORKLOAD_LABEL = "units.zaroz.cloud/workload"
_NAMED = frozenset(("unit.ready", "unit.allocated"))  # their data needs `private_name`
_DRAIN_REASONS = ("stop", "scale_down", "replace", "destroy")


def rfc3339(t_ns: int) -> str:
    """UTC with microseconds, the form most platforms write."""
    secs, frac = divmod(t_ns, _S)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac // 1000:06d}Z"


@dataclass(frozen=True)
class FleetShape:
    """How big the fleet is and when its backlog ends (`start_ns`: the live stream's start)."""

    workloads: int
    units: int
    start_ns: int
    seed: int = 1
    span_s: float = 3600.0  # the backlog's units were created over this long before start_ns

    def workload_list(self) -> list[Workload]:
        return [Workload(f"wl-{n + 1}", f"fleet-{n + 1}") for n in range(self.workloads)]

    def units_of(self, w: int) -> int:
        """Units of workload index w (0-based): the fleet split as evenly as it goes."""
        base, extra = divmod(self.units, self.workloads)
        return base + (1 if w < extra else 0)

    def backlog_len(self, w: int) -> int:
        """Events in workload w's backlog: its units.scaled, then STEPS per unit."""
        return 1 + STEPS * self.units_of(w)

    def backlog_events(self) -> int:
        return sum(self.backlog_len(w) for w in range(self.workloads))


def unit_of(w: int, k: int, slug: str, wid: str) -> dict[str, Any]:
    return {"id": f"u_{w:08x}{k:016x}", "key": f"{slug[:20]}-{k:x}",
            "labels": {WORKLOAD_LABEL: wid, "zone": "abc"[k % 3]}}


def envelope(w: int, seq: int, kind: str, at_ns: int, unit: dict[str, Any] | None,
             data: dict[str, Any]) -> dict[str, Any]:
    if unit is not None and kind in _NAMED:
        data["private_name"] = f"{unit['key']}.svc"
    return {"seq": seq, "id": f"evt_{w:08x}{seq:024x}", "type": kind, "contract_version": 1,
            "occurred_at": rfc3339(at_ns), "service_instance_id": f"platform-{w:08x}",
            "unit": unit, "data": data}


class Backlog:
    """Workload w's backlog event at any seq, made when asked (nothing stored)."""

    def __init__(self, shape: FleetShape) -> None:
        self.shape = shape
        self.workloads = shape.workload_list()

    def created_ns(self, w: int, k: int) -> int:
        n = self.shape.units_of(w)
        span = int(self.shape.span_s * _S)
        # spread over the span, the last created 60 s before start; workloads interleaved
        return self.shape.start_ns - span + (span - 60 * _S) * k // max(1, n) + w * 1000

    def event(self, w: int, seq: int) -> dict[str, Any]:
        wl = self.workloads[w]
        if seq == 1:
            n = self.shape.units_of(w)
            return envelope(w, 1, "units.scaled", self.created_ns(w, 0) - _S, None,
                            {"from": 0, "to": n, "reason": "initial"})
        k, step = divmod(seq - 2, STEPS)
        kind, offset, data = _BACKLOG_STEPS[step]
        # readiness varies by unit (2-10 s), deterministically
        if step >= 2:
            offset += (k * 7919 % 8000 - 4000) * _MS
        return envelope(w, seq, kind, self.created_ns(w, k) + offset,
                        unit_of(w, k, wl.slug, wl.id), dict(data))


class FleetLog(_Log):
    """A route log whose first `backlog` seqs are made on demand; later ones are appended."""

    def __init__(self, backlog: Backlog, w: int) -> None:
        super().__init__()
        self.backlog = backlog
        self.w = w
        self.backlog_head = backlog.shape.backlog_len(w)
        self.head = self.backlog_head

    def page(self, after: int, limit: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if after < self.backlog_head:
            last = min(self.backlog_head, after + limit)
            out = [self.backlog.event(self.w, s) for s in range(after + 1, last + 1)]
            limit -= len(out)
            after = last
        if limit > 0:
            out.extend(super().page(after, limit))
        return out


def fleet_route(shape: FleetShape, **kwargs: Any) -> tuple[RouteServer, Backlog]:
    """A RouteServer over the fleet's workloads with their backlogs in place."""
    backlog = Backlog(shape)
    server = RouteServer(backlog.workloads, **kwargs)
    server.logs = {wl.id: FleetLog(backlog, w) for w, wl in enumerate(backlog.workloads)}
    return server, backlog


_FollowUp = tuple[int, int, int, str, int, str]  # (due ns, order, workload, kind, unit, arg)


class LiveFleet:
    """The steady stream after the backlog: `tick(now_ns)` returns each workload's new events.

    Each tick emits the follow-ups that are due (acks, idles, drain ends, a new unit's steps),
    then starts new actions on random free units until the rate's budget is spent; follow-ups
    count against the budget, so the long-run rate is `rate` events a second.
    """

    def __init__(self, backlog: Backlog, rate: float, seed: int = 1) -> None:
        self.backlog = backlog
        self.shape = backlog.shape
        self.rate = rate
        self.rng = random.Random(f"fleet:{seed}")
        n_w = self.shape.workloads
        self.seq = [self.shape.backlog_len(w) for w in range(n_w)]
        self.next_unit = [self.shape.units_of(w) for w in range(n_w)]
        # free units per workload (accepting, no action under way), in no order
        self.free: list[list[int]] = [list(range(self.shape.units_of(w))) for w in range(n_w)]
        self.tracked = [self.shape.units_of(w) for w in range(n_w)]
        self.heap: list[_FollowUp] = []
        self.order = 0
        self.carry = 0.0
        self.last_ns: int | None = None
        self.emitted = 0

    def units_tracked(self) -> int:
        """Units created and not destroyed in what was emitted so far."""
        return sum(self.tracked)

    # -- free-unit bookkeeping ------------------------------------------------------------------

    def _take(self, w: int) -> int | None:
        free = self.free[w]
        if not free:
            return None
        i = self.rng.randrange(len(free))
        k = free[i]
        free[i] = free[-1]  # O(1): the last one takes its place
        free.pop()
        return k

    def _release(self, w: int, k: int) -> None:
        self.free[w].append(k)

    def _later(self, due: int, w: int, kind: str, k: int, arg: str = "") -> None:
        self.order += 1
        heapq.heappush(self.heap, (due, self.order, w, kind, k, arg))

    # -- events -----------------------------------------------------------------------------

    def _emit(self, out: dict[str, list[dict[str, Any]]], w: int, kind: str, at: int, k: int,
              data: dict[str, Any]) -> None:
        self.seq[w] += 1
        wl = self.backlog.workloads[w]
        out.setdefault(wl.id, []).append(
            envelope(w, self.seq[w], kind, at, unit_of(w, k, wl.slug, wl.id), data))
        self.emitted += 1

    def _follow_up(self, out: dict[str, list[dict[str, Any]]], item: _FollowUp) -> None:
        due, _, w, kind, k, arg = item
        rng = self.rng
        if kind == "ack":
            if rng.random() < 0.05:
                self._emit(out, w, "unit.allocation_undelivered", due, k, {})
            else:
                self._emit(out, w, "unit.allocation_delivered", due, k, {})
            self._release(w, k)
        elif kind in ("unit.idle", "unit.accepting") and arg == "release":
            self._emit(out, w, kind, due, k, {})
            self._release(w, k)
        elif kind == "unit.stopped":
            self._emit(out, w, kind, due, k, {})
            self._later(due + 50 * _MS, w, "unit.destroyed", k)
        elif kind == "unit.destroyed":
            self._emit(out, w, kind, due, k, {"reason": "drained"})
            self.tracked[w] -= 1
        else:  # a new unit's unit.starting and unit.ready
            self._emit(out, w, kind, due, k, {})

    def _start_action(self, out: dict[str, list[dict[str, Any]]], now: int) -> None:
        rng = self.rng
        w = rng.randrange(self.shape.workloads)
        k = self._take(w)
        if k is None:
            return  # a workload with no free unit: this step of the budget is spent anyway
        r = rng.random()
        if r < 0.55:
            self._emit(out, w, "unit.allocated", now, k, {})
            ack = max(1000, int(0.04 * _S * rng.lognormvariate(0.0, 0.9)))
            self._later(now + ack, w, "ack", k)
        elif r < 0.80:
            self._emit(out, w, "unit.busy", now, k, {})
            self._later(now + int(rng.uniform(0.5, 5.0) * _S), w, "unit.idle", k, "release")
        elif r < 0.98:
            self._emit(out, w, "unit.not_accepting", now, k, {})
            self._later(now + _S, w, "unit.accepting", k, "release")
        else:  # this unit leaves, a new one arrives
            reason = _DRAIN_REASONS[rng.randrange(len(_DRAIN_REASONS))]
            self._emit(out, w, "unit.draining", now, k, {"reason": reason})
            drain = max(1000, int(4 * _S * rng.lognormvariate(0.0, 0.8)))
            self._later(now + drain, w, "unit.stopped", k)
            new = self.next_unit[w]
            self.next_unit[w] += 1
            self.tracked[w] += 1
            self._emit(out, w, "unit.created", now, new, {})
            self._later(now + 300 * _MS, w, "unit.starting", new)
            ready = now + int(rng.uniform(2.0, 10.0) * _S)
            self._later(ready, w, "unit.ready", new)
            self._later(ready + 100 * _MS, w, "unit.accepting", new, "release")

    def tick(self, now_ns: int) -> dict[str, list[dict[str, Any]]]:
        """Every event due by now_ns, per workload id, ascending seq."""
        out: dict[str, list[dict[str, Any]]] = {}
        if self.last_ns is None:
            self.last_ns = now_ns
            return out
        self.carry += self.rate * max(0, now_ns - self.last_ns) / _S
        self.last_ns = now_ns
        while self.heap and self.heap[0][0] <= now_ns:
            self._follow_up(out, heapq.heappop(self.heap))
            self.carry -= 1
        while self.carry >= 1:
            before = self.emitted
            self._start_action(out, now_ns)
            self.carry -= max(1, self.emitted - before)
        return out


def append_all(server: RouteServer, batches: Iterable[tuple[str, list[dict[str, Any]]]]) -> int:
    n = 0
    for wid, events in batches:
        if events:
            server.append(wid, events)
            n += len(events)
    return n
