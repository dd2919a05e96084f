"""Applying one workload's event log in seq order (measurements.md, "Applying a workload's events").

Pure: events and explicit decisions (give up a gap, expire idle units at a given time) go in,
observer calls come out. The same inputs in any order give the same observations, so replay,
live tailing and tests share this code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from exporter.contract import is_valid_event
from exporter.model.observations import Observer
from exporter.model.ranges import INT_MAX, SEQ_MAX, clock_fits
from exporter.model.seqranges import SeqRanges
from exporter.model.units import HANDLERS, Unit
from exporter.timestamps import parse_rfc3339_ns
from exporter.vocabulary import EVENT_TYPES, INVALID_RANGE, UNKNOWN

KNOWN_TYPES = frozenset(EVENT_TYPES)
PING = "webhook.ping"
# Marks a seq used up by an event that failed the schema (it is no gap, and it applies nothing).
_INVALID = object()
# Marks a seq used up by an event valid per the schema holding a value the model or the store
# cannot hold (model/ranges.py): counted invalid with reason "range". Kept as RANGE in snapshots.
_RANGE = object()
RANGE = INVALID_RANGE
_GONE = object()
SNAPSHOT_VERSION = 1


def _seq_of(obj: Any) -> int | None:
    s = obj.get("seq") if type(obj) is dict else None
    return s if type(s) is int and 1 <= s <= SEQ_MAX else None


def unfit(ev: dict[str, Any]) -> tuple[str, Any] | None:
    """The first field of a schema-valid event whose value the model or the store cannot hold
    (model/ranges.py), with its value; None when every value fits. `seq` is checked apart."""
    at = ev["occurred_at"]
    if not clock_fits(at):
        return "occurred_at", at
    if ev["type"] == "units.scaled":
        to = ev["data"]["to"]
        if type(to) is int and to > INT_MAX:
            return "data.to", to
    return None


def _pending_of(ev: Any) -> Any:
    """A stored pending event as the log holds it: None and RANGE are the two markers."""
    if ev is None:
        return _INVALID
    if ev == RANGE:
        return _RANGE
    return _RANGE if type(ev) is dict and is_valid_event(ev) and unfit(ev) else ev


def _stored(ev: Any) -> Any:
    return None if ev is _INVALID else RANGE if ev is _RANGE else ev


class WorkloadLog:
    """Reorders, deduplicates and applies the events of one workload."""

    def __init__(
        self,
        observer: Observer,
        *,
        after: int = 0,
        max_pending: int = 10_000,
        idle_ns: int = 24 * 3600 * 10**9,
    ) -> None:
        self.obs = observer
        self.next = after + 1
        self.pending: dict[int, Any] = {}
        self.max_pending = max_pending
        self.idle_ns = idle_ns
        self.units: dict[str, Unit] = {}
        self.expired = 0
        self.last_at = ""  # occurred_at of the last event applied, parsed when read
        self.desired: int | None = None  # units the last units.scaled asked for
        # Wall time (ns) the wiring first found the workload gone from the route's workload
        # list, kept with the log so a restart does not restart its retention
        # (wiring/lifetime.py); None while listed. The model only keeps it.
        self.left_at_ns: int | None = None
        # Per source, the seqs it delivered: a duplicate is the same source delivering again.
        self.sources: dict[str, SeqRanges] = {}
        # Optional consumer of every applied unit event, in seq order (the trace builder).
        self.tap: Callable[[str, str, str, dict[str, Any], str | None], None] | None = None
        # Optional: told (seq, field, value) of each event refused for a value out of range,
        # when it arrives (the wiring logs it; the count is the observer's, when applied).
        self.rejected: Callable[[int, str, Any], None] | None = None
        # What changed since the state layer last took it (`track`), as pure data, so a
        # checkpoint writes only that: the ids of units changed or dropped, the seqs that
        # entered or left `pending`, and this log's name in the pipeline-wide `moved` set
        # (its own fields: cursor, clock, counts, sources). None: not tracked (no checkpoint).
        self.touched: set[str] | None = None
        self.pending_moved: set[int] | None = None
        self._moved: set[str] | None = None
        self._name = ""

    def track(self, name: str, moved: set[str]) -> None:
        """Record changes from now on (see `touched`); everything held now counts as changed."""
        self._name, self._moved = name, moved
        self.touched = set(self.units)
        self.pending_moved = set(self.pending)
        moved.add(name)

    def taken(self) -> None:
        """The state layer holds this log's state as it is now: nothing is changed."""
        if self.touched is not None and self.pending_moved is not None:
            self.touched.clear()
            self.pending_moved.clear()

    def _mark(self) -> None:
        m = self._moved
        if m is not None:
            m.add(self._name)

    @property
    def clock(self) -> int:
        """The event clock: occurred_at of the last event applied, in ns (0 before any)."""
        return parse_rfc3339_ns(self.last_at) if self.last_at else 0

    @property
    def applied_through(self) -> int:
        """Every seq up to this one was applied, invalid or given up."""
        return self.next - 1

    def offer(self, obj: Any, source: str = "file") -> str:
        """An event as decoded JSON from `source` (route, webhook or file), in any order,
        possibly again. Returns what it was: accepted (applied or waiting behind a gap),
        duplicate (this source delivered the seq before: the platform redelivered), refetched
        (already had from another source or an earlier fetch: the exporter's own overlap),
        invalid, or ping."""
        valid = is_valid_event(obj)
        if valid and obj["type"] == PING:
            self.obs.ping(obj["seq"])
            return "ping"
        if valid:
            seq = obj["seq"]
            if type(seq) is not int:  # JSON Schema's integer admits 1.0
                seq = int(seq)
            if seq > SEQ_MAX:
                return self._beyond(seq, source)
            bad = unfit(obj)
            if bad is not None:
                if self.rejected is not None:
                    self.rejected(seq, *bad)
                obj = _RANGE
        else:
            seq = _seq_of(obj)
            if seq is None or (type(obj) is dict and obj.get("type") == PING):
                self.obs.invalid("schema")
                return "invalid"
            obj = _INVALID
        self._mark()
        seen = self.sources.get(source)
        if seen is None:
            seen = self.sources[source] = SeqRanges()
        again = seen.add(seq)
        if seq == self.next:
            self._apply(seq, obj)
            self.next = seq + 1
            if self.pending:
                self._drain_pending()
        elif seq < self.next or seq in self.pending:
            if again:
                self.obs.duplicate(source)
                return "duplicate"
            self.obs.refetched(source)
            return "refetched"
        else:
            self.pending[seq] = obj
            if self.pending_moved is not None:
                self.pending_moved.add(seq)
            if len(self.pending) > self.max_pending:
                self.give_up(min(self.pending) - 1)
        return "invalid" if obj is _INVALID or obj is _RANGE else "accepted"

    def _beyond(self, seq: int, source: str) -> str:
        """A seq beyond what the model holds (model/ranges.py): stepped over. It uses up none
        of the model's seqs (nothing after it is a gap for it) and is counted invalid once:
        its source's ranges remember it, so a redelivery is a duplicate, another source's copy
        a refetch, and that source goes on after it (`cursor`)."""
        self._mark()
        seen = self.sources.get(source)
        if seen is None:
            seen = self.sources[source] = SeqRanges()
        if seen.add(seq):
            self.obs.duplicate(source)
            return "duplicate"
        if any(seq in r for s, r in self.sources.items() if s != source):
            self.obs.refetched(source)
            return "refetched"
        if self.rejected is not None:
            self.rejected(seq, "seq", seq)
        self.obs.invalid(RANGE)
        return "invalid"

    def cursor(self, source: str) -> int:
        """Where `source` (the route) goes on after: `applied_through`, or past the last seq
        beyond the model's range it delivered (asked for again, it would only come again).
        Any integer the source gave, exactly."""
        seen = self.sources.get(source)
        if seen is not None and seen.lasts and seen.lasts[-1] > SEQ_MAX:
            return seen.lasts[-1]  # applied_through is at most SEQ_MAX
        return self.next - 1

    def pass_to(self, source: str, through: int) -> None:
        """`source` holds nothing at or before `through` any more (a route whose oldest
        retained seq is past it): what is missing up to it is given up, and beyond the model's
        seqs `source` goes on after it (`cursor`), or it would be asked for again forever."""
        self.give_up(through)
        if through > SEQ_MAX:
            seen = self.sources.get(source)
            if seen is None:
                seen = self.sources[source] = SeqRanges()
            seen.add(through)

    def offer_many(self, objs: Iterable[Any], not_json: object, source: str = "file",
                   slow: Callable[[Any, str], object] | None = None) -> None:
        """`offer` of each decoded line in order (`not_json` stands for a line that was no JSON:
        `reject_json`), for replay. The usual case runs inline: a valid unit event with the next
        seq, nothing waiting, from a source whose newest run it continues; it is `_apply`'s body
        with the lookups hoisted out of the loop. Everything else (workload events such as
        units.scaled, pings, gaps, invalid events) takes `offer`, or `slow` when given (a
        wrapper of `offer`: the report notes the line of an event left waiting behind a gap).
        `objs` is iterated once, in order, one line at a time, so a caller can tell the line
        being applied from its iterator. The observer and tap see the same calls in the same
        order as from `offer` line by line (tests compare them).
        (Counting the applied events per batch instead was measured: it cost more than it saved
        at replay's batches of ~25 lines.)"""
        valid, obs = is_valid_event, self.obs
        offer = self.offer if slow is None else slow
        applied, invalid = obs.applied, obs.invalid
        units, handlers, known, tap = self.units, HANDLERS, KNOWN_TYPES, self.tap
        pending, nxt = self.pending, self.next
        touched = self.touched
        self._mark()
        seen = self.sources.get(source)
        lasts = seen.lasts if seen is not None else None
        for obj in objs:
            if obj is not_json:
                invalid("json")
                continue
            if valid(obj):
                seq = obj["seq"]
                t = obj["type"]
                unit = obj["unit"]
                at = obj["occurred_at"]
                if (seq == nxt and lasts and lasts[-1] + 1 == seq and not pending
                        and type(seq) is int and type(unit) is dict and t != PING
                        and seq <= SEQ_MAX and "1971" < at < "2262"):  # ranges.clock_fits
                    lasts[-1] = seq  # SeqRanges.add's usual case
                    try:  # _apply(seq, obj) of a unit event, inline: keep the two alike
                        self.last_at = at
                        applied(t if t in known else UNKNOWN, seq)
                        uid = unit["id"]
                        if touched is not None:
                            touched.add(uid)
                        u = units.get(uid)
                        h = handlers.get(t)
                        if h is not None:
                            if u is None:
                                u = units[uid] = Unit(at)
                            else:
                                u.last = at
                            h(u, uid, at, obj["data"], obs)
                            if t == "unit.destroyed":
                                del units[uid]
                        elif u is not None:
                            u.last = at
                        if tap is not None:
                            tap(uid, t, at, obj["data"], unit.get("key"))
                    except (ValueError, KeyError, TypeError):
                        invalid("schema")
                    self.next = nxt = seq + 1
                    continue
            offer(obj, source)  # validated again: rare (first event, gaps, pings, invalid)
            pending, nxt = self.pending, self.next
            if lasts is None:
                seen = self.sources.get(source)
                lasts = seen.lasts if seen is not None else None

    def reject_json(self) -> None:
        """A line or delivery that is not JSON at all: invalid, with no seq to use up."""
        self.obs.invalid("json")

    def give_up(self, through: int) -> None:
        """Seqs up to `through` that have not arrived are lost: count them and apply what waits."""
        through = min(through, SEQ_MAX)  # no seq beyond can be held (a route's bad head)
        self._mark()
        while self.next <= through:
            if self.next in self.pending:
                if self.pending_moved is not None:
                    self.pending_moved.add(self.next)
                self._apply(self.next, self.pending.pop(self.next))
                self.next += 1
                continue
            end = min(through, min(self.pending, default=through + 1) - 1)
            self.obs.gap(self.next, end)
            self.next = end + 1
        self._drain_pending()

    def flush(self) -> None:
        """End of input (replay): give up every gap still open."""
        if self.pending:
            self.give_up(max(self.pending))

    def expire(self, now_ns: int, uids: Iterable[str] | None = None) -> None:
        """Drop units with no event for the idle limit, so memory stays bounded; only those of
        `uids` that are still there when given (a sweep in slices: wiring/expiry.py)."""
        limit = now_ns - self.idle_ns
        units = self.units
        if uids is None:
            stale = [uid for uid, u in units.items() if parse_rfc3339_ns(u.last) < limit]
        else:
            stale = [uid for uid in uids
                     if (u := units.get(uid)) is not None and parse_rfc3339_ns(u.last) < limit]
        for uid in stale:
            del units[uid]
        if stale:
            self.expired += len(stale)
            self._mark()
            if self.touched is not None:
                self.touched.update(stale)

    def snapshot(self) -> dict[str, Any]:
        """Everything `restore` needs to go on as if never stopped, as JSON-serialisable data.

        Checkpoints store it so that a restart neither re-applies nor skips events and intervals
        that span the restart (created before, ready after) are still measured. Events pending
        behind a gap are kept as received; an invalid one is stored as None.
        """
        return {
            **self.head(),
            "pending": [[seq, _stored(ev)] for seq, ev in sorted(self.pending.items())],
            "units": {uid: u.snapshot() for uid, u in self.units.items()},
        }

    def span_of(self, unit_id: str, kind: str) -> str | None:
        """The discriminator of the unit's latest span of `kind` (`Unit.span_of`): what an
        observer reporting a measurement of that unit asks, to name its span."""
        u = self.units.get(unit_id)
        return None if u is None else u.span_of(kind)

    def head(self) -> dict[str, Any]:
        """The snapshot without its units and pending events: what an incremental checkpoint
        writes for a log that moved (the rest goes row by row, `take_units`, `take_pending`)."""
        return {
            "v": SNAPSHOT_VERSION,
            "next": self.next,
            "last_at": self.last_at,
            "expired": self.expired,
            "sources": {src: r.snapshot() for src, r in sorted(self.sources.items())},
            **({} if self.desired is None else {"desired": self.desired}),
            **({} if self.left_at_ns is None else {"left_at_ns": self.left_at_ns}),
        }

    def take_units(self, limit: int | None = None) -> list[tuple[str, list[Any] | None]]:
        """Each unit changed since the last call, as (id, its snapshot, or None when it is
        gone); from then on none counts as changed (`track`). `limit`: at most that many (the
        rest stay changed, for the next call: a whole save takes them in slices)."""
        touched, units = self.touched, self.units
        if not touched:
            return []
        if limit is not None and len(touched) > limit:
            taken = [touched.pop() for _ in range(limit)]
        else:
            taken = list(touched)
            touched.clear()
        out = []
        for uid in taken:
            u = units.get(uid)
            out.append((uid, None if u is None else u.snapshot()))
        return out

    def take_pending(self) -> list[tuple[int, bool, Any]]:
        """Each seq that entered or left `pending` since the last call, as (seq, whether it
        waits now, its event: None for an invalid one, RANGE for one out of range)."""
        moved, pending = self.pending_moved, self.pending
        if not moved:
            return []
        out = []
        for seq in sorted(moved):
            ev = pending.get(seq, _GONE)
            out.append((seq, ev is not _GONE, None if ev is _GONE else _stored(ev)))
        moved.clear()
        return out

    def restore(self, state: dict[str, Any]) -> None:
        """Replace this log's state with a `snapshot`; no observer call is made."""
        if state.get("v") != SNAPSHOT_VERSION:
            raise ValueError(f"unsupported workload snapshot version {state.get('v')!r}")
        self.next = int(state["next"])
        # Checked again: a checkpoint written before the range checks may hold such events.
        self.pending = {int(seq): _pending_of(ev) for seq, ev in state["pending"]}
        self.units = {uid: Unit.restore(u) for uid, u in state["units"].items()}
        self.last_at = state["last_at"]
        self.expired = int(state["expired"])
        self.sources = {src: SeqRanges.restore(r)
                        for src, r in state.get("sources", {}).items()}
        self.desired = state.get("desired")
        left = state.get("left_at_ns")
        self.left_at_ns = None if left is None else int(left)

    def left(self, at_ns: int | None) -> None:
        """The wiring found the workload gone from the route's list at `at_ns` (None: listed
        again); stored with the log's next checkpoint."""
        if at_ns != self.left_at_ns:
            self.left_at_ns = at_ns
            self._mark()

    def restore_desired(self, units: int) -> None:
        """A checkpoint of version 1 kept the desired units beside the log, not in it."""
        self.desired = units
        self._mark()
        self.obs.desired(units)

    def skip_to(self, cursor: int) -> None:
        """Start a fresh log after `cursor` (--start-from head): what waits at or before it is
        dropped, like everything else before it."""
        cursor = min(cursor, SEQ_MAX)
        self.next = cursor + 1
        if self.pending_moved is not None:
            self.pending_moved.update(s for s in self.pending if s <= cursor)
        self.pending = {s: ev for s, ev in self.pending.items() if s > cursor}
        self._mark()

    def _drain_pending(self) -> None:
        p = self.pending
        moved = self.pending_moved
        while self.next in p:
            seq = self.next
            if moved is not None:
                moved.add(seq)
            self._apply(seq, p.pop(seq))
            self.next = seq + 1

    def _apply(self, seq: int, ev: Any) -> None:
        # offer_many inlines the unit-event half of this: change both alike
        # (tests/test_workload_offer_many.py compares them on every kind of log line).
        if ev is _INVALID:
            self.obs.invalid("schema")
            return
        if ev is _RANGE:
            self.obs.invalid(RANGE)
            return
        try:
            t = ev["type"]
            self.last_at = at = ev["occurred_at"]
            self.obs.applied(t if t in KNOWN_TYPES else UNKNOWN, seq)
            unit = ev["unit"]
            if type(unit) is dict:
                uid = unit["id"]
                if self.touched is not None:
                    self.touched.add(uid)
                units = self.units
                u = units.get(uid)
                h = HANDLERS.get(t)
                if h is not None:
                    if u is None:
                        u = units[uid] = Unit(at)
                    else:
                        u.last = at
                    h(u, uid, at, ev["data"], self.obs)
                    if t == "unit.destroyed":
                        del units[uid]
                elif u is not None:
                    u.last = at
                if self.tap is not None:
                    self.tap(uid, t, at, ev["data"], unit.get("key"))
            elif t == "units.scaled":
                self.desired = ev["data"]["to"]
                self.obs.desired(self.desired)
        except (ValueError, KeyError, TypeError):
            # A validator and the parser that disagree must not stop the log: count it.
            self.obs.invalid("schema")
