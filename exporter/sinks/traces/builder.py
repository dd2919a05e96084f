"""Turns one workload's unit events (the model's `tap` stream) into finished span records.

Pure: no SDK, no I/O, no wall clock. Events go in through `__call__` in seq order; every span
that ends comes out through `out` as a `SpanRecord` with exact nanosecond times taken from the
events' `occurred_at`. State is one `_UnitTrace` per unit with an open root, dropped at
`unit.destroyed` or when `expire` finds the unit idle, so memory stays bounded like the model's.

Span tree of a unit (trace id derived from the unit id, see `ids`):

- `unit` (root): unit.created (or the first event seen) -> unit.destroyed. Events on it:
  `accepting`, `not_accepting`, `exited` (code, restarted), `failed` (reason). ERROR after a
  unit.failed.
- `starting`: unit.created -> first unit.ready; ERROR when the unit stops, exits for good, fails
  or is destroyed first.
- `allocation`: unit.allocated -> unit.allocation_delivered; ERROR when undelivered, superseded
  by another unit.allocated, or abandoned (stopped, exited, failed, destroyed).
- `busy`: unit.busy -> unit.idle (or the unit's end).
- `draining`: first unit.draining -> first stopped / exited / failed / destroyed, with its reason.
- `incarnation`: unit.exited{restarted=true} -> next unit.ready; ERROR when it exits again,
  stops, fails or is destroyed first.

Child spans are exported as they end, long before their root: they name the root's span id,
which is derived, so the root need not exist yet. The root is exported once, at unit.destroyed,
or at idle expiry (ended at the unit's last event, `zaroz.unit.expired=true`), or by
`close_all` at the end of a replay (`zaroz.span.incomplete=true`).

Restarts: `state()` / `restore()` carry every open span and each root's start through the
checkpoint, so a restored builder fed the events after the checkpoint's cursor ends exactly the
spans an uninterrupted one would. Without a checkpoint, a successor still continues the same
trace but starts the root at the first event it saw (`zaroz.unit.created_seen=false`), and the
spans open across the restart are lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.model.traceids import span_id_of, trace_id_of
from exporter.model.units import DRAIN_REASONS
from exporter.timestamps import parse_rfc3339_ns as ns_of

Attrs = dict[str, Any]
MAX_ROOT_EVENTS = 128  # the SDK's default span event limit; a flapping unit keeps the first ones


@dataclass(slots=True)
class SpanRecord:
    """A finished span, ready for any exporter."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int  # 0 for the root
    start_ns: int
    end_ns: int
    attributes: Attrs
    events: list[tuple[str, int, Attrs]] = field(default_factory=list)
    error: str | None = None  # the ERROR status description; None leaves the status unset


class _Open:
    """A child span that has started and not ended."""

    __slots__ = ("attrs", "span_id", "start", "start_ns")

    def __init__(self, span_id: int, start: str, attrs: Attrs, start_ns: int) -> None:
        self.span_id = span_id
        self.start = start
        self.start_ns = start_ns
        self.attrs = attrs


class _UnitTrace:
    __slots__ = (
        "alloc", "busy", "cluster", "created_seen", "disc", "drain", "dropped_events", "error",
        "events", "incarnation", "key", "last", "ready", "root_id", "start", "starting",
        "trace_id", "uid",
    )

    def __init__(self, uid: str, trace_id: int, root_id: int, at: str) -> None:
        self.uid = uid
        self.trace_id = trace_id
        self.root_id = root_id
        self.start = at
        self.last = at
        self.created_seen = False
        self.ready = False
        self.key: str | None = None
        # Root span events: (name, occurred_at string from the log, or ns from the cluster, attrs)
        self.events: list[tuple[str, str | int, Attrs]] = []
        self.dropped_events = 0
        self.cluster: Attrs | None = None  # the UnitSignal's attributes, once the join knew it
        self.error: str | None = None
        self.disc: dict[str, tuple[str, int]] = {}  # kind -> (start at, n) of its latest span
        self.starting: _Open | None = None
        self.alloc: _Open | None = None
        self.busy: _Open | None = None
        self.drain: _Open | None = None
        self.incarnation: _Open | None = None


_CHILDREN = ("starting", "alloc", "busy", "drain", "incarnation")


def _at(e: tuple[str, int, Attrs]) -> int:
    return e[1]
STATE_VERSION = 1


def unit_state(u: _UnitTrace) -> list[Any]:
    """One unit's open trace as plain JSON-able data (the checkpoint stores one row of it)."""
    open_ = {}
    for slot in _CHILDREN:
        s = getattr(u, slot)
        if s is not None:
            open_[slot] = [f"{s.span_id:016x}", s.start, s.attrs]
    return [u.start, u.last, u.created_seen, u.ready, u.key, [list(e) for e in u.events],
            u.dropped_events, u.error, {k: list(v) for k, v in u.disc.items()}, open_,
            u.cluster]


def _unit_restore(workload: str, uid: str, st: list[Any]) -> _UnitTrace:
    (start, last, created_seen, ready, key, events, dropped, error, disc, open_) = st[:10]
    u = _UnitTrace(uid, trace_id_of(workload, uid), span_id_of(workload, uid, "unit"), start)
    u.last = last
    u.created_seen = bool(created_seen)
    u.ready = bool(ready)
    u.key = key
    u.events = [(n, at, dict(a)) for n, at, a in events]
    u.dropped_events = int(dropped)
    u.error = error
    u.disc = {k: (at, int(n)) for k, (at, n) in disc.items()}
    for slot, (sid, at, attrs) in open_.items():
        if slot not in _CHILDREN:
            raise ValueError(f"unknown open span {slot!r}")
        setattr(u, slot, _Open(int(sid, 16), at, dict(attrs), ns_of(at)))
    u.cluster = st[10] if len(st) > 10 else None
    return u


class TraceBuilder:
    """The span state machine of one workload; callable as a `WorkloadLog.tap`."""

    def __init__(
        self,
        workload: str,
        out: Callable[[SpanRecord], None],
        *,
        idle_ns: int = 24 * 3600 * 10**9,
    ) -> None:
        self.workload = workload
        self.out = out
        self.idle_ns = idle_ns
        self.units: dict[str, _UnitTrace] = {}
        self.expired = 0
        # Units whose trace state changed since the checkpoint last took it (`track`; None:
        # no checkpoint), and the pipeline-wide set this workload's name joins when it does.
        self.touched: set[str] | None = None
        self._moved: set[str] | None = None
        # The current event's occurred_at, parsed at most once (a span often ends and another
        # starts at the same event).
        self._at: str | None = None
        self._at_ns = 0
        # Set by the cluster join: unit id -> (the UnitSignal's attributes, root events waiting
        # for the unit). Read once per trace, when it opens (or is restored): after that the
        # join pushes what changes (`cluster_attrs`, `cluster_event`), so an event costs no
        # lookup.
        self.context: Callable[[str], tuple[Attrs | None, list[Any]] | None] | None = None
        self._on: dict[str, Callable[[_UnitTrace, str, dict[str, Any]], None]] = {
            "unit.created": self._created,
            "unit.ready": self._ready,
            "unit.accepting": self._accepting,
            "unit.not_accepting": self._not_accepting,
            "unit.allocated": self._allocated,
            "unit.allocation_delivered": self._delivered,
            "unit.allocation_undelivered": self._undelivered,
            "unit.busy": self._busy,
            "unit.idle": self._idle,
            "unit.draining": self._draining,
            "unit.stopped": self._stopped,
            "unit.exited": self._exited,
            "unit.failed": self._failed,
            "unit.destroyed": self._destroyed,
        }

    # -- input -----------------------------------------------------------------------------------

    def __call__(
        self, unit_id: str, type_: str, at: str, data: dict[str, Any], key: str | None = None
    ) -> None:
        """One applied unit event (the tap's signature; `key` when the caller knows it)."""
        h = self._on.get(type_)
        if h is None:
            return
        u = self.units.get(unit_id)
        if u is None:
            w = self.workload
            u = self.units[unit_id] = _UnitTrace(
                unit_id, trace_id_of(w, unit_id), span_id_of(w, unit_id, "unit"), at
            )
            if self.context is not None:
                self._pull(u)
        u.last = at
        if self.touched is not None:
            self._touch(unit_id)
        if key is not None:
            u.key = key
        # The model validated the event and calls this inside its own error handling: a field
        # read differently here must neither stop the log nor count the event as invalid.
        try:  # noqa: SIM105 - contextlib.suppress costs an object per event
            h(u, at, data)
        except (KeyError, TypeError, ValueError):
            pass
        if type_ == "unit.destroyed":
            del self.units[unit_id]

    def _pull(self, u: _UnitTrace) -> None:
        """What the join knew of the unit before its trace opened: its UnitSignal's attributes
        and the generation events that waited for the trace. The only read of the join; it
        pushes every later change to the open trace."""
        assert self.context is not None
        ctx = self.context(u.uid)
        if ctx is None:
            return
        attrs, waiting = ctx
        if attrs is not None:
            u.cluster = attrs
        while waiting:
            name, ns, ea = waiting.pop(0)
            self._event(u, name, ns, ea)
        if self.touched is not None:
            self._touch(u.uid)

    def cluster_event(self, unit_id: str, name: str, at_ns: int, attrs: Attrs) -> bool:
        """A UnitSignal's generation change, as a root span event; False when the unit has no
        open trace (the join then keeps it for the unit's first event)."""
        u = self.units.get(unit_id)
        if u is None:
            return False
        self._event(u, name, at_ns, attrs)
        if self.touched is not None:
            self._touch(unit_id)
        return True

    def cluster_attrs(self, unit_id: str, attrs: Attrs) -> None:
        u = self.units.get(unit_id)
        if u is not None:
            u.cluster = attrs
            if self.touched is not None:
                self._touch(unit_id)

    def track(self, moved: set[str]) -> None:
        """Record changes from now on (see `touched`); every open trace counts as changed."""
        self._moved = moved
        self.touched = set(self.units)
        moved.add(self.workload)

    def taken(self) -> None:
        """The state layer holds this builder's state as it is now."""
        if self.touched is not None:
            self.touched.clear()

    def _touch(self, unit_id: str) -> None:
        assert self.touched is not None and self._moved is not None
        self.touched.add(unit_id)
        self._moved.add(self.workload)

    def expire(self, now_ns: int) -> None:
        """End the traces of units idle for `idle_ns` (as the model forgets them)."""
        limit = now_ns - self.idle_ns
        stale = [uid for uid, u in self.units.items() if ns_of(u.last) < limit]
        for uid in stale:
            u = self.units.pop(uid)
            self._close(u, u.last, {"zaroz.unit.expired": True})
            if self.touched is not None:
                self._touch(uid)
        self.expired += len(stale)

    def state(self) -> dict[str, Any]:
        """Every unit's open spans, root start and root events, as plain JSON-able data (ids
        as hex: JSON numbers stop at 2**53 in many readers)."""
        return {"v": STATE_VERSION, "expired": self.expired,
                "units": {uid: unit_state(u) for uid, u in self.units.items()}}

    def restore(self, data: dict[str, Any]) -> None:
        """Replace the state with a `state()`; no span is emitted."""
        if data.get("v") != STATE_VERSION:
            raise ValueError(f"unsupported trace builder state version {data.get('v')!r}")
        w = self.workload
        self.units = {uid: _unit_restore(w, uid, st) for uid, st in data["units"].items()}
        self.expired = int(data["expired"])
        if self.context is not None:  # what the join pushed to the traces this replaced
            for u in self.units.values():
                self._pull(u)

    def close_all(self, at: str | None = None) -> None:
        """End every open span (end of a replay): at `at`, or each unit's last event."""
        for uid, u in self.units.items():
            self._close(u, at or u.last, {"zaroz.span.incomplete": True})
            if self.touched is not None:
                self._touch(uid)
        self.units.clear()

    # -- span helpers ----------------------------------------------------------------------------

    def _open(self, u: _UnitTrace, kind: str, at: str, attrs: Attrs | None = None) -> _Open:
        uid = u.uid
        prev = u.disc.get(kind)
        n = prev[1] + 1 if prev is not None and prev[0] == at else 0
        u.disc[kind] = (at, n)
        sid = span_id_of(self.workload, uid, kind, f"{at}#{n}" if n else at)
        a = {"zaroz.workload": self.workload, "zaroz.unit.id": uid}
        if attrs:
            a.update(attrs)
        return _Open(sid, at, a, self._ns(at))

    def _end(
        self, u: _UnitTrace, name: str, s: _Open, at: str, error: str | None = None,
        attrs: Attrs | None = None,
    ) -> None:
        start, end = s.start_ns, self._ns(at)
        if attrs:
            s.attrs.update(attrs)
        if u.cluster:
            s.attrs.update(u.cluster)
        if end < start:  # clock skew between events: keep the span, flag it
            end = start
            s.attrs["zaroz.clock_skew"] = True
        self.out(SpanRecord(name, u.trace_id, s.span_id, u.root_id, start, end, s.attrs,
                            error=error))

    def _ns(self, at: str) -> int:
        if at is not self._at:
            self._at_ns = ns_of(at)
            self._at = at
        return self._at_ns

    def _event(self, u: _UnitTrace, name: str, at: str | int, attrs: Attrs) -> None:
        if len(u.events) < MAX_ROOT_EVENTS:
            u.events.append((name, at, attrs))
        else:
            u.dropped_events += 1

    def _units_end(self, u: _UnitTrace, at: str, cause: str, for_good: bool) -> None:
        """What a stop, exit, failure or destruction ends (mirrors the model's `_end`)."""
        if u.alloc is not None:
            self._end(u, "allocation", u.alloc, at, "abandoned",
                      {"zaroz.allocation.outcome": "abandoned"})
            u.alloc = None
        if u.drain is not None:
            self._end(u, "draining", u.drain, at, None, {"zaroz.drain.end": cause})
            u.drain = None
        if u.busy is not None:
            self._end(u, "busy", u.busy, at)
            u.busy = None
        if u.incarnation is not None:
            self._end(u, "incarnation", u.incarnation, at, f"{cause} before ready")
            u.incarnation = None
        if for_good and u.starting is not None:
            self._end(u, "starting", u.starting, at, f"{cause} before ready")
            u.starting = None

    def _close(self, u: _UnitTrace, at: str, attrs: Attrs) -> None:
        for name, slot in zip(
            ("starting", "allocation", "busy", "draining", "incarnation"), _CHILDREN, strict=True
        ):
            s = getattr(u, slot)
            if s is not None:
                self._end(u, name, s, at, None, attrs)
                setattr(u, slot, None)
        self._root(u, at, attrs)

    def _root(self, u: _UnitTrace, at: str, attrs: Attrs) -> None:
        uid = u.uid
        a: Attrs = {"zaroz.workload": self.workload, "zaroz.unit.id": uid}
        if u.key is not None:
            a["zaroz.unit.key"] = u.key
        if not u.created_seen:
            a["zaroz.unit.created_seen"] = False
        if u.dropped_events:
            a["zaroz.unit.events_dropped"] = u.dropped_events
        if u.cluster:
            a.update(u.cluster)
        a.update(attrs)
        start, end = ns_of(u.start), ns_of(at)
        if end < start:
            end = start
            a["zaroz.clock_skew"] = True
        events = sorted(((name, ns_of(t) if isinstance(t, str) else t, ea)
                         for name, t, ea in u.events), key=_at)
        self.out(SpanRecord("unit", u.trace_id, u.root_id, 0, start, end, a, events, u.error))

    # -- event handlers (unit state, occurred_at, data) -----------------------------------------

    def _created(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        if u.created_seen:
            return
        u.created_seen = True
        u.start = at
        if not u.ready and u.starting is None:
            u.starting = self._open(u, "starting", at)

    def _ready(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        u.ready = True
        if u.starting is not None:
            self._end(u, "starting", u.starting, at)
            u.starting = None
        if u.incarnation is not None:
            self._end(u, "incarnation", u.incarnation, at)
            u.incarnation = None

    def _accepting(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        self._event(u, "accepting", at, {})

    def _not_accepting(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        self._event(u, "not_accepting", at, {})

    def _allocated(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        if u.alloc is not None:
            self._end(u, "allocation", u.alloc, at, "superseded",
                      {"zaroz.allocation.outcome": "superseded"})
        aid = data.get("allocation_id")
        u.alloc = self._open(
            u, "allocation", at,
            {"zaroz.allocation.id": aid} if type(aid) is str and len(aid) <= 128 else None,
        )

    def _delivered(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        if u.alloc is not None:
            self._end(u, "allocation", u.alloc, at, None,
                      {"zaroz.allocation.outcome": "delivered"})
            u.alloc = None

    def _undelivered(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        if u.alloc is not None:
            self._end(u, "allocation", u.alloc, at, "undelivered",
                      {"zaroz.allocation.outcome": "undelivered"})
            u.alloc = None

    def _busy(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        if u.busy is None:
            u.busy = self._open(u, "busy", at)

    def _idle(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        if u.busy is not None:
            self._end(u, "busy", u.busy, at)
            u.busy = None

    def _draining(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        if u.drain is None:
            r = data.get("reason")
            reason = r if type(r) is str and r in DRAIN_REASONS else "unknown"
            u.drain = self._open(u, "draining", at, {"zaroz.drain.reason": reason})

    def _stopped(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        self._units_end(u, at, "stopped", True)

    def _exited(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        code, restarted = data["code"], data["restarted"] is True
        self._units_end(u, at, "exited", not restarted)
        self._event(u, "exited", at, {"zaroz.exit.code": int(code),
                                      "zaroz.exit.restarted": restarted})
        if restarted:
            u.incarnation = self._open(u, "incarnation", at)

    def _failed(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        reason = str(data["reason"])[:256]
        self._units_end(u, at, "failed", True)
        self._event(u, "failed", at, {"zaroz.failure.reason": reason})
        u.error = f"failed: {reason}"

    def _destroyed(self, u: _UnitTrace, at: str, data: dict[str, Any]) -> None:
        self._units_end(u, at, "destroyed", True)
        r = data.get("reason")
        self._root(u, at, {"zaroz.destroy.reason": r[:256]} if type(r) is str else {})
