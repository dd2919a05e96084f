"""The whole timeline of one unit, planned when the unit is created.

Planning ahead keeps streaming simple (a heap of future events) and lets every event carry the
truth effects it completes, computed from the exact floored times it will be rendered with.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from zaroz_sim.config import LogNormal, SimConfig, Workload
from zaroz_sim.timefmt import TimeForm, floor_ns, random_form
from zaroz_sim.truth import DRAIN_REASONS, Effect, Interval, Outcome, drain_reason

_MS = 1_000_000
_S = 1_000_000_000
_TERMINAL = ("unit.stopped", "unit.exited", "unit.failed", "unit.destroyed")


@dataclass
class Planned:
    """One future event: log position (true time) and what it will say."""

    log_ns: int
    type: str
    occurred_ns: int
    form: TimeForm
    unit: dict[str, Any] | None
    data: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)  # unknown envelope fields
    effects: list[Effect] = field(default_factory=list)


def extras(rng: random.Random, p: float, data: dict[str, Any]) -> dict[str, Any]:
    """Unknown fields a future contract minor could add (envelope extras; data mutated)."""
    if rng.random() >= p:
        return {}
    data["x_future_hint"] = {"level": rng.randint(0, 3), "tags": ["a", "b"]}
    return {"trace_id": f"{rng.getrandbits(128):032x}", "x_region": rng.choice(["eu", "us"])}


class UnitBuilder:
    """Appends a unit's events in time order while tracking pending allocation and drain."""

    def __init__(self, cfg: SimConfig, wl: Workload, index: int, t0: int) -> None:
        self.cfg = cfg
        self.rng = random.Random(f"{cfg.seed}:{wl.id}:unit:{index}")
        rng = self.rng
        self.factor = cfg.slow_factor if rng.random() < cfg.p_slow else 1.0
        key = f"{wl.slug[:20]}-{index:x}-{rng.getrandbits(24):06x}"
        self.unit = {
            "id": f"u_{rng.getrandbits(96):024x}",
            "key": key[:40],
            "labels": {"units.zaroz.cloud/workload": wl.id, "zone": rng.choice("abc")},
        }
        self.private_name = f"{key}.{wl.slug}.svc"
        self.t = t0
        self.last_occ = -1
        self.events: list[Planned] = []
        self.pending_alloc: int | None = None  # occurred_ns of the pending unit.allocated
        self.draining: tuple[int, str] | None = None  # (occurred_ns, reason label)
        self.ready_seen = False
        self.startup_done = False

    def lat(self, dist: LogNormal) -> int:
        return dist.sample_ns(self.rng, self.factor)

    def add(
        self,
        dt_ns: int,
        kind: str,
        data: dict[str, Any] | None = None,
        skew_from: int | None = None,
    ) -> Planned:
        """Add an event dt_ns after the previous one; `skew_from` lets it be stamped before it."""
        rng = self.rng
        self.t += max(dt_ns, 1_000)
        form = random_form(rng)
        if skew_from is not None and rng.random() < self.cfg.p_skew:
            occ = floor_ns(skew_from - rng.randint(_MS, 2 * _S), form.digits)
        else:
            occ = floor_ns(self.t, form.digits)
            while occ < self.last_occ:  # keep a unit's own clock monotonic: no accidental skew
                form = form.with_digits(form.digits + 1)
                occ = floor_ns(self.t, form.digits)
            self.last_occ = occ
        data = dict(data or {})
        extra = extras(rng, self.cfg.p_unknown_fields, data)
        event = Planned(self.t, kind, occ, form, self.unit, data, extra)
        self.events.append(event)
        self._account(event)
        if kind != "unit.destroyed" and rng.random() < self.cfg.p_unknown_type:
            self.add(rng.randint(_MS, 50 * _MS), "unit.future_thing", {"what": "something new"})
        return event

    def _account(self, ev: Planned) -> None:
        """Attach the outcome and interval effects this event completes (measurements.md)."""
        if ev.type == "unit.ready" and not self.ready_seen:
            self.ready_seen = self.startup_done = True
            ev.effects.append(Interval("ready", self.events[0].occurred_ns, ev.occurred_ns))
            ev.effects.append(Outcome("startup", "ready"))
        elif ev.type == "unit.allocated":
            if self.pending_alloc is not None:
                ev.effects.append(Outcome("allocation", "superseded"))
            self.pending_alloc = ev.occurred_ns
        elif ev.type == "unit.allocation_delivered" and self.pending_alloc is not None:
            ev.effects.append(Interval("allocation_ack", self.pending_alloc, ev.occurred_ns))
            ev.effects.append(Outcome("allocation", "delivered"))
            self.pending_alloc = None
        elif ev.type == "unit.allocation_undelivered" and self.pending_alloc is not None:
            ev.effects.append(Outcome("allocation", "undelivered"))
            self.pending_alloc = None
        elif ev.type == "unit.draining" and self.draining is None:
            self.draining = (ev.occurred_ns, drain_reason(ev.data))
        elif ev.type in _TERMINAL:
            if self.pending_alloc is not None:
                ev.effects.append(Outcome("allocation", "abandoned"))
                self.pending_alloc = None
            if self.draining is not None:
                start, reason = self.draining
                ev.effects.append(Interval("drain", start, ev.occurred_ns, reason))
                self.draining = None
            if not self.startup_done and ev.type in ("unit.failed", "unit.destroyed"):
                outcome = "failed" if ev.type == "unit.failed" else "destroyed"
                ev.effects.append(Outcome("startup", outcome))
                self.startup_done = True

    # -- lifecycle pieces ---------------------------------------------------------------------

    def allocate(self, dt_ns: int) -> Planned:
        data: dict[str, Any] = {"private_name": self.private_name}
        if self.rng.random() < 0.5:
            data["allocation_id"] = f"alloc_{self.rng.getrandbits(64):016x}"
        return self.add(dt_ns, "unit.allocated", data)

    def ack_end(self, kind: str) -> Planned:
        skew_from = self.pending_alloc if kind == "unit.allocation_delivered" else None
        return self.add(self.lat(self.cfg.allocation_ack), kind, skew_from=skew_from)

    def terminal(self, dt_ns: int, kind: str, data: dict[str, Any]) -> Planned:
        skew_from = self.draining[0] if self.draining else None
        return self.add(dt_ns, kind, data, skew_from=skew_from)


def plan_unit(cfg: SimConfig, wl: Workload, index: int, t0: int) -> list[Planned]:
    """Plan one unit from unit.created to unit.destroyed (platform.md section 3 order)."""
    b = UnitBuilder(cfg, wl, index, t0)
    rng = b.rng
    b.add(0, "unit.created")
    readiness = b.lat(cfg.readiness)
    starting_at = int(readiness * rng.uniform(0.05, 0.4))
    b.add(starting_at, "unit.starting")
    roll = rng.random()
    if roll < cfg.p_startup_fail:
        reason = rng.choice(["image_pull_failed", "crash_loop", "readiness_timeout"])
        b.add(int(readiness * rng.uniform(0.3, 1.5)), "unit.failed", {"reason": reason})
        b.add(rng.randint(50 * _MS, 2 * _S), "unit.destroyed", {"reason": "failed"})
        return b.events
    if roll < cfg.p_startup_fail + cfg.p_destroyed_before_ready:
        reason = rng.choice(["cancelled", "scale_down"])
        b.add(int(readiness * rng.uniform(0.1, 0.9)), "unit.destroyed", {"reason": reason})
        return b.events
    ready_at = t0 + readiness
    ready_data = {"private_name": b.private_name, "public_endpoints": []}
    b.add(ready_at - b.t, "unit.ready", ready_data, skew_from=b.events[0].occurred_ns)
    b.add(rng.randint(_MS, 200 * _MS), "unit.accepting")
    end_at = b.t + b.lat(cfg.lifetime)
    crash_at = None
    if rng.random() < cfg.p_crash_restart:
        crash_at = b.t + int((end_at - b.t) * rng.uniform(0.2, 0.8))
    _serve(b, end_at, crash_at)
    _end_of_life(b)
    return b.events


def _serve(b: UnitBuilder, end_at: int, crash_at: int | None) -> None:
    """Allocation sessions until end_at, with at most one crash-and-restart on the way."""
    cfg, rng = b.cfg, b.rng
    while True:
        gap = b.lat(cfg.allocation_gap)
        if crash_at is not None and b.t + gap >= crash_at:
            _crash(b, max(crash_at - b.t, _MS))
            crash_at = None
            continue
        if b.t + gap >= end_at:
            return
        if rng.random() < cfg.p_accepting_toggle:
            b.add(gap // 3, "unit.not_accepting")
            b.add(gap // 3, "unit.accepting")
            gap -= 2 * (gap // 3)
        b.allocate(gap)
        if rng.random() < cfg.p_superseded:
            b.allocate(rng.randint(_MS, 20 * _MS))
        if rng.random() < cfg.p_undelivered:
            b.ack_end("unit.allocation_undelivered")
            continue
        b.ack_end("unit.allocation_delivered")
        b.add(rng.randint(_MS, 100 * _MS), "unit.busy")
        b.add(b.lat(cfg.session), "unit.idle")


def _crash(b: UnitBuilder, dt_ns: int) -> None:
    """unit.exited {code != 0, restarted: true}, then a new incarnation gets ready again."""
    rng = b.rng
    if rng.random() < 0.4:  # crash with an allocation in flight: it is abandoned
        b.allocate(dt_ns)
        dt_ns = rng.randint(_MS, 20 * _MS)
    code = rng.choice([1, 2, 137, 139])
    b.add(dt_ns, "unit.exited", {"code": code, "restarted": True})
    readiness = b.lat(b.cfg.readiness)
    b.add(readiness // 4, "unit.starting")
    b.add(readiness - readiness // 4, "unit.ready", {"private_name": b.private_name})
    b.add(rng.randint(_MS, 200 * _MS), "unit.accepting")


def _end_of_life(b: UnitBuilder) -> None:
    """Drain and stop (mostly), or exit/fail outright; always ends with unit.destroyed."""
    cfg, rng = b.cfg, b.rng
    if rng.random() < cfg.p_abandoned:
        b.allocate(rng.randint(_MS, _S))
    roll = rng.random()
    if roll < 0.75:
        data: dict[str, Any] = {}
        destroy_reason = {"reason": "drained"}
        reason_roll = rng.random()
        if reason_roll >= cfg.p_drain_reason_missing + cfg.p_drain_reason_unknown:
            data["reason"] = rng.choices(DRAIN_REASONS, (3, 2, 2, 4))[0]
        elif reason_roll >= cfg.p_drain_reason_missing:
            data["reason"] = rng.choice(["evicted", "maintenance_window"])
        b.add(rng.randint(_MS, 500 * _MS), "unit.not_accepting")
        b.add(rng.randint(_MS, 10 * _MS), "unit.draining", data)
        drain = b.lat(cfg.drain)
        end_roll = rng.random()
        if end_roll < 0.75:
            b.terminal(drain, "unit.stopped", {})
        elif end_roll < 0.88:
            b.terminal(drain, "unit.exited", {"code": 0, "restarted": False})
        elif end_roll < 0.94:
            b.terminal(drain, "unit.failed", {"reason": "drain_timeout"})
        else:
            b.terminal(drain, "unit.destroyed", destroy_reason)
            return
        b.add(rng.randint(10 * _MS, _S), "unit.destroyed", destroy_reason)
    elif roll < 0.9:
        code = rng.choice([0, 0, 1, 143])
        b.terminal(rng.randint(_MS, _S), "unit.exited", {"code": code, "restarted": False})
        b.add(rng.randint(10 * _MS, _S), "unit.destroyed", {"reason": "exited"})
    else:
        reason = rng.choice(["oom_killed", "node_lost", "health_check_failed"])
        b.terminal(rng.randint(_MS, _S), "unit.failed", {"reason": reason})
        b.add(rng.randint(10 * _MS, _S), "unit.destroyed", {"reason": "failed"})
