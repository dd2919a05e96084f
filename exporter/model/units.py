"""One unit's lifecycle state and how each event type changes it (measurements.md).

Handlers get `occurred_at` as the string and parse it only when an interval needs it: parsing
is a large share of a replay's time, and most events start or end nothing.

Interpretations where measurements.md is silent, documented in docs/metrics.md:
- readiness and startups are only measured for units whose unit.created was seen;
- a repeated unit.draining during a drain neither restarts it nor adds a sample: a drain is
  measured from its first unit.draining;
- an allocation_delivered/undelivered with no pending allocation changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from exporter import vocabulary
from exporter.model.observations import Observer
from exporter.timestamps import parse_rfc3339_ns as ns_of

DRAIN_REASONS = frozenset(vocabulary.DRAIN_REASONS)


class Unit:
    __slots__ = ("alloc", "created", "drain", "drain_reason", "last", "ready", "started")

    def __init__(self, at: str) -> None:
        self.created: int | None = None
        self.ready = False
        self.started = False
        self.alloc: int | None = None
        self.drain: int | None = None
        self.drain_reason = "unknown"
        self.last = at  # occurred_at of the unit's latest event, parsed only when expiring

    def snapshot(self) -> list[Any]:
        """The unit's state as a JSON-serialisable list (checkpoints; see WorkloadLog.snapshot)."""
        return [self.created, self.ready, self.started, self.alloc, self.drain,
                self.drain_reason, self.last]

    @classmethod
    def restore(cls, state: Sequence[Any]) -> Unit:
        """The inverse of `snapshot` (also of a stored row, whose flags are 0 or 1)."""
        u = cls(state[6])
        u.created, u.alloc, u.drain, u.drain_reason = state[0], state[3], state[4], state[5]
        u.ready, u.started = bool(state[1]), bool(state[2])
        return u


def _end(u: Unit, uid: str, at: str, obs: Observer) -> None:
    """A stop, exit, failure or destruction: ends a pending allocation and a drain."""
    if u.alloc is not None:
        u.alloc = None
        obs.allocation(uid, "abandoned", None)
    if u.drain is not None:
        d = ns_of(at) - u.drain
        u.drain = None
        if d < 0:
            obs.skew("drain")
        else:
            obs.drain(uid, u.drain_reason, d)


def on_created(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    if u.created is None:
        u.created = ns_of(at)


def on_ready(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    if u.ready:
        return
    u.ready = True
    if u.created is None:
        return
    d = ns_of(at) - u.created
    if d < 0:
        obs.skew("ready")
    else:
        obs.ready(uid, d)
    if not u.started:
        u.started = True
        obs.startup(uid, "ready")


def on_allocated(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    if u.alloc is not None:
        obs.allocation(uid, "superseded", None)
    u.alloc = ns_of(at)


def on_delivered(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    if u.alloc is None:
        return
    d = ns_of(at) - u.alloc
    u.alloc = None
    if d < 0:
        obs.skew("allocation_ack")
        obs.allocation(uid, "delivered", None)
    else:
        obs.allocation(uid, "delivered", d)


def on_undelivered(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    if u.alloc is not None:
        u.alloc = None
        obs.allocation(uid, "undelivered", None)


def on_draining(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    if u.drain is None:
        u.drain = ns_of(at)
        r = data.get("reason")
        u.drain_reason = r if type(r) is str and r in DRAIN_REASONS else "unknown"


def on_stopped(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    _end(u, uid, at, obs)


def on_exited(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    _end(u, uid, at, obs)
    obs.exited(uid, data["code"], data["restarted"])


def _startup_lost(u: Unit, uid: str, outcome: str, obs: Observer) -> None:
    if u.created is not None and not u.started:
        u.started = True
        obs.startup(uid, outcome)


def on_failed(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    _end(u, uid, at, obs)
    _startup_lost(u, uid, "failed", obs)
    obs.failed(uid, data["reason"])


def on_destroyed(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    _end(u, uid, at, obs)
    _startup_lost(u, uid, "destroyed", obs)
    obs.destroyed(uid, data["reason"])


HANDLERS = {
    "unit.created": on_created,
    "unit.ready": on_ready,
    "unit.allocated": on_allocated,
    "unit.allocation_delivered": on_delivered,
    "unit.allocation_undelivered": on_undelivered,
    "unit.draining": on_draining,
    "unit.stopped": on_stopped,
    "unit.exited": on_exited,
    "unit.failed": on_failed,
    "unit.destroyed": on_destroyed,
}
