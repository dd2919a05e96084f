"""One unit's lifecycle state and how each event type changes it (measurements.md).

Handlers get `occurred_at` as the string and parse it only when an interval needs it: parsing
is a large share of a replay's time, and most events start or end nothing.

An interval's start is kept as the discriminator of the span the traces give it
(`sinks/traces/builder.py`: the occurred_at string of the event that opened it, `#n` after it
for the n-th span of its kind opened at that same string), so a measurement knows its span's id
(`span_of`) with traces on or off. A checkpoint written before held the start as nanoseconds:
such an interval is measured as before and has no span id.

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


Start = str | int | None  # an open interval's span discriminator (int: ns, older checkpoints)
SPAN_KINDS = ("starting", "allocation", "draining")  # the spans the model measures


def start_ns(start: str | int) -> int:
    """An interval's start (a `Start` that is not None) in nanoseconds."""
    if type(start) is int:
        return start
    return ns_of(str(start).partition("#")[0])


def next_disc(prev: Start, at: str) -> str:
    """The discriminator of a span opened at `at` when the latest of its kind was `prev`: `at`,
    or `at#n` for the n-th opened at that same string (the trace builder's rule)."""
    if type(prev) is not str:
        return at
    t, _, n = prev.partition("#")
    return f"{at}#{int(n or 0) + 1}" if t == at else at


class Unit:
    __slots__ = ("alloc", "alloc_last", "created", "drain", "drain_last", "drain_reason", "last",
                 "ready", "started")

    def __init__(self, at: str) -> None:
        self.created: Start = None
        self.ready = False
        self.started = False
        self.alloc: Start = None
        self.drain: Start = None
        # The discriminator of the latest allocation and drain once ended (the next one opened
        # at the same string counts on from it).
        self.alloc_last: Start = None
        self.drain_last: Start = None
        self.drain_reason = "unknown"
        self.last = at  # occurred_at of the unit's latest event, parsed only when expiring

    def snapshot(self) -> list[Any]:
        """The unit's state as a JSON-serialisable list (checkpoints; see WorkloadLog.snapshot):
        seven fields, nine when an ended allocation or drain is remembered."""
        s = [self.created, self.ready, self.started, self.alloc, self.drain,
             self.drain_reason, self.last]
        if self.alloc_last is not None or self.drain_last is not None:
            s += [self.alloc_last, self.drain_last]
        return s

    @classmethod
    def restore(cls, state: Sequence[Any]) -> Unit:
        """The inverse of `snapshot` (also of a stored row, whose flags are 0 or 1)."""
        u = cls(state[6])
        u.created, u.alloc, u.drain, u.drain_reason = state[0], state[3], state[4], state[5]
        u.ready, u.started = bool(state[1]), bool(state[2])
        if len(state) > 8:
            u.alloc_last, u.drain_last = state[7], state[8]
        return u

    def span_of(self, kind: str) -> str | None:
        """The discriminator of the unit's latest span of `kind` (one of SPAN_KINDS), open or
        just ended; None when unknown (none, or a start from an older checkpoint)."""
        if kind == "starting":
            d = self.created
        elif kind == "allocation":
            d = self.alloc if self.alloc is not None else self.alloc_last
        else:
            d = self.drain if self.drain is not None else self.drain_last
        return d if type(d) is str else None


def _end(u: Unit, uid: str, at: str, obs: Observer) -> None:
    """A stop, exit, failure or destruction: ends a pending allocation and a drain."""
    if u.alloc is not None:
        u.alloc_last, u.alloc = u.alloc, None
        obs.allocation(uid, "abandoned", None)
    if u.drain is not None:
        d = ns_of(at) - start_ns(u.drain)
        u.drain_last, u.drain = u.drain, None
        if d < 0:
            obs.skew("drain")
        else:
            obs.drain(uid, u.drain_reason, d)


def on_created(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    if u.created is None:
        u.created = at


def on_ready(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    if u.ready:
        return
    u.ready = True
    if u.created is None:
        return
    d = ns_of(at) - start_ns(u.created)
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
    u.alloc = next_disc(u.alloc if u.alloc is not None else u.alloc_last, at)
    u.alloc_last = None


def on_delivered(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    if u.alloc is None:
        return
    d = ns_of(at) - start_ns(u.alloc)
    u.alloc_last, u.alloc = u.alloc, None
    if d < 0:
        obs.skew("allocation_ack")
        obs.allocation(uid, "delivered", None)
    else:
        obs.allocation(uid, "delivered", d)


def on_undelivered(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    if u.alloc is not None:
        u.alloc_last, u.alloc = u.alloc, None
        obs.allocation(uid, "undelivered", None)


def on_draining(u: Unit, uid: str, at: str, data: dict[str, Any], obs: Observer) -> None:
    if u.drain is None:
        u.drain = next_disc(u.drain_last, at)
        u.drain_last = None
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
