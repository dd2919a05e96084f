"""What the exporter knows of each UnitSignal, from the objects a watch delivers.

Pure: objects and the exporter's wall-clock time of each delivery (`now`, read by the source)
go in; per-object state snapshots and observations come out. A watcher that remembers can
measure what a snapshot exporter cannot: how long each generation waited for the agent.

Where a time is taken from (documented in docs/metrics.md):
- a generation appears when the watch first shows it; for one that was already there when the
  exporter first saw the object (start-up, relist), the time of the spec's last write in
  `metadata.managedFields` (the manager owning `f:spec`), which is sound because that write
  created the current generation; clamped to `now`;
- a generation is observed when the watch shows `status.observedGeneration` reaching it;
- readiness is `creationTimestamp` to `status.signalledReady`, both from the object;
- an allocation starts at `allocatedAt`, else when the watch first showed it (not measured when
  it was already there at first sight and had no `allocatedAt`), and is acknowledged when the
  watch shows `status.allocationAck` equal to its id (not measured when already acknowledged at
  first sight).

What decides whether something was already measured (each object's generations waiting, status
seen, readiness measured, allocations acknowledged, violations under way) is the model's memory:
`memory` gives it per object as plain data, `restore` takes it back, and `touched` names the
objects whose memory changed (an O(1) mark per change), so a checkpoint stores it in proportion
to change. Restored, a relist after a restart is a relist like any other: an unchanged object
measures nothing again, a changed one is measured as the watch would have measured it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any, NamedTuple, Protocol

import msgspec

from exporter.contract import is_valid_unit_signal_spec, is_valid_unit_signal_status
from exporter.model.ranges import CLOCK_MAX_NS, CLOCK_MIN_NS, INT_MAX, INT_MIN, clock_ns
from exporter.model.signal import Status, UnitSignal, decode_status, raw_value
from exporter.model.units import DRAIN_REASONS
from exporter.timestamps import parse_rfc3339_ns
from exporter.vocabulary import ACTIVITIES, PHASES

WORKLOAD_LABEL = "units.zaroz.cloud/workload"
STATUS_FIELDS = (
    "observedGeneration", "agentVersion", "signalledReady", "accepting", "activity",
    "activitySince", "shutdownRequestedAt", "allocationAck", "seq",
)
_STATUS_SET = frozenset(STATUS_FIELDS)
_READY_AT, _SHUTDOWN_AT = map(STATUS_FIELDS.index, ("signalledReady", "shutdownRequestedAt"))
_NULLS = dict.fromkeys(STATUS_FIELDS)
# The status fields that start or end a measurement (see UnitSignalModel._status_only).
_measured = itemgetter(*map(STATUS_FIELDS.index, (
    "observedGeneration", "signalledReady", "allocationAck")))
# The status fields holding an integer (two) or a time, checked against model/ranges.py.
_STATUS_VALUES = itemgetter(*map(STATUS_FIELDS.index, (
    "observedGeneration", "seq", "signalledReady", "activitySince", "shutdownRequestedAt")))
ALLOCATION_MEMORY = 32  # allocation ids remembered per UnitSignal, for unknown-ack checks
MEMORY_VERSION = 1  # the form of `UnitSignalModel.memory`'s records

Key = tuple[str, str]  # (namespace, name)
Labels = tuple[tuple[str, str], ...]

# A typed object's status, decoded from its Raw by a decoder of its own (not raw_value's):
# tests count spec decodes through signal's decoder apart from status decodes.
_loads = msgspec.json.Decoder().decode
_asdict = msgspec.structs.asdict
_astuple = msgspec.structs.astuple
_unfit = msgspec.ValidationError
assert Status.__struct_fields__ == STATUS_FIELDS  # a typed status's tuple is its key
intern = sys.intern  # bounded strings repeated across 100k objects (namespace, workload...)


class SignalState(NamedTuple):
    """Everything exported per UnitSignal; the sink diffs two of these."""

    workload: str
    unit_id: str
    key: str
    agent_version: str
    labels: tuple[tuple[str, str], ...]
    generation_lag: int
    pending_since: float | None
    ready: int
    accepting: int
    activity: str
    draining: str
    allocation_pending: int
    status_seq: int
    spec_valid: int
    status_valid: int
    stuck_invalid_spec: int
    phase: str
    phase_since: float


class SignalTap(Protocol):
    """Optional listener for the traces' join (sinks/traces/join.py): which unit each object
    is, and its generations as they are written and observed (times: seconds, as `now`)."""

    def known(self, key: Key, state: SignalState) -> None: ...
    def forgotten(self, key: Key, state: SignalState) -> None: ...
    def generation(self, workload: str, unit_id: str, what: str, generation: int,
                   at: float) -> None: ...


class SignalObserver(Protocol):
    def state(self, key: Key, old: SignalState | None, new: SignalState | None) -> None: ...
    def generation_observed(self, workload: str, seconds: float) -> None: ...
    def ready(self, workload: str, seconds: float) -> None: ...
    def allocation_ack(self, workload: str, seconds: float) -> None: ...
    def violation(self, workload: str, rule: str) -> None: ...
    def skew(self, workload: str, measurement: str) -> None: ...


_new_state = tuple.__new__  # SignalState without its Python-level __new__ (hot path)
_AGENT, _ACCEPTING, _ACTIVITY, _SEQ, _STATUS_VALID = map(SignalState._fields.index, (
    "agent_version", "accepting", "activity", "status_seq", "status_valid"))
_WORKLOAD, _LABELS, _DRAINING, _PHASE = map(SignalState._fields.index, (
    "workload", "labels", "draining", "phase"))


# What each field of a restored SignalState may be (a record is read back from the store).
_STR, _INT, _TIME = (str,), (int,), (float, int)
_STATE_TYPES: tuple[tuple[type, ...], ...] = (
    _STR, _STR, _STR, _STR, (list,), _INT, (float, int, type(None)), _INT, _INT, _STR, _STR,
    _INT, _INT, _INT, _INT, _INT, _STR, _TIME)
_DRAINING_VALUES = frozenset((*DRAIN_REASONS, "none"))


class _Tracked:
    """Per-UnitSignal memory; containers are made only when needed (100k objects)."""

    __slots__ = (
        "ahead", "alloc_id", "allocs", "bad_acks", "draining", "gen", "observed", "pending",
        "ready_seen", "seq", "spec_mgen", "spec_valid", "state", "status_key", "status_valid",
        "uid", "ukey", "unit_id",
    )

    def __init__(self, uid: str | None) -> None:
        self.uid = uid
        self.state: SignalState | None = None
        self.pending: dict[int, float] | None = None  # generation -> when it appeared
        self.observed: int | None = None
        self.seq: int | None = None
        self.spec_mgen: Any = None
        # read from the spec once per generation of it (see UnitSignalModel._spec)
        self.gen: int | None = None
        self.unit_id = ""
        self.ukey = ""
        self.draining = "none"
        self.alloc_id: str | None = None
        self.spec_valid = 1
        self.status_key: tuple[Any, ...] | None = None
        self.status_valid = 1
        self.ready_seen = False
        # allocation id -> [start or None, acknowledged]; insertion-ordered and bounded.
        self.allocs: dict[str, list[Any]] | None = None
        self.bad_acks: set[str] | None = None
        self.ahead = False


# A time as epoch ns; None when it is no `date-time` or outside the model's clock (one outside
# is counted once, as an out_of_range violation, where its object is validated).
_ns = clock_ns


def _seconds(ts: Any) -> float | None:
    ns = _ns(ts)
    return None if ns is None else ns / 1e9


def _spec_written_at(managed_fields: Any) -> float | None:
    """When the spec was last written, from the managedFields entry that owns `f:spec`."""
    best = None
    if type(managed_fields) is not list:
        return None
    for entry in managed_fields:
        if type(entry) is not dict or entry.get("subresource"):
            continue
        fields = entry.get("fieldsV1")
        if type(fields) is dict and "f:spec" in fields:
            t = _seconds(entry.get("time"))
            if t is not None and (best is None or t > best):
                best = t
    return best


def _int(v: Any) -> int | None:
    """An integer the model holds; None when it is none, or beyond 64 bits (counted once as an
    out_of_range violation where its object is validated)."""
    return v if type(v) is int and INT_MIN <= v <= INT_MAX else None


def _out_of_range(a: Any, b: Any, *times: Any) -> bool:
    """Whether an integer (`a`, `b`) is beyond 64 bits, or a `date-time` outside the model's
    clock (a malformed one is the schema's violation, not this). One call per object and no
    parse for a time within years 1971-2261 (ranges.clock_fits): it runs for each of 100k
    objects at a sync."""
    if (type(a) is int and not INT_MIN <= a <= INT_MAX) or (
            type(b) is int and not INT_MIN <= b <= INT_MAX):
        return True
    for ts in times:
        if type(ts) is str and not "1971" < ts < "2262":
            try:
                ns = parse_rfc3339_ns(ts)
            except ValueError:
                continue
            if not CLOCK_MIN_NS <= ns <= CLOCK_MAX_NS:
                return True
    return False


class UnitSignalModel:
    status_fast_path = True  # off only in the test that checks it changes nothing

    def __init__(self, observer: SignalObserver, labels_allowlist: Iterable[str] = ()) -> None:
        self.obs = observer
        self.allowlist = tuple(labels_allowlist)
        self.objects: dict[Key, _Tracked] = {}
        # workload -> phase -> key -> since: the per-workload phase counts and oldest ages.
        self.phases: dict[str, dict[str, dict[Key, float]]] = {}
        self.tap: SignalTap | None = None  # None unless traces join the cluster
        self._shared_labels: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}
        # With a checkpoint (`track`): the objects whose memory changed or went since it was
        # last taken (`take_memory`). None: not tracked.
        self.touched: set[Key] | None = None

    # -- the source's three calls ------------------------------------------------------------

    def replace(self, objects: list[dict[str, Any]], now: float,
                namespace: str | None = None) -> None:
        """A full (re)list of one namespace (None: all): upsert every object, forget those of
        that scope no longer there."""
        seen: set[Key] = set()
        for obj in objects:
            key = self.upsert(obj, now)
            if key is not None:
                seen.add(key)
        self.reconcile(seen, namespace)

    def reconcile(self, listed: set[Key], namespace: str | None = None) -> None:
        """After a list applied page by page: forget the objects of the scope it did not hold."""
        gone = [k for k in self.objects
                if k not in listed and (namespace is None or k[0] == namespace)]
        for key in gone:
            self._forget(key)

    def delete(self, obj: dict[str, Any], now: float) -> None:
        key = _key_of(obj)
        if key is not None and key in self.objects:
            self._forget(key)

    def upsert(self, obj: UnitSignal | dict[str, Any], now: float) -> Key | None:
        """An object's new state: typed (`signal.UnitSignal`, its spec decoded only when its
        generation moved) or a plain dict (decoded untyped: tests, objects that did not fit the
        types). Both take the same path and give the same result."""
        # The hot path of a watch (100k objects): straight-line code, each field read once.
        status: dict[str, Any] | Status | None
        skey: tuple[Any, ...] | None = None  # the status's fields in STATUS_FIELDS order
        fits = False  # the status decoded typed (`signal.Status`): its integers bounded
        if isinstance(obj, UnitSignal):
            meta = obj.metadata
            ns, name = meta.namespace, meta.name
            if ns is None or name is None:
                return None
            key = (ns, name)
            uid, mgen, labels, raw = meta.uid, meta.generation, meta.labels, obj.status
            status = None
            if len(raw):
                try:
                    typed = decode_status(raw)  # kept typed: a dict only where validated
                    status, skey, fits = typed, _astuple(typed), True
                except _unfit:  # another form, or an integer beyond 64 bits: checked here
                    status = _loads(raw)
        else:
            k = _key_of(obj)
            if k is None:
                return None
            key = k
            m = obj["metadata"]
            uid, mgen, labels = m.get("uid"), m.get("generation"), m.get("labels")
            status = obj.get("status")
        t = self.objects.get(key)
        if t is not None and uid is not None and t.uid is not None and uid != t.uid:
            self._forget(key)  # deleted and created again under the same name while away
            t = None
        first_sight = t is None
        if t is None:
            key = (intern(key[0]), key[1])  # 100k objects share a few namespaces
            t = self.objects[key] = _Tracked(uid)
        if type(labels) is dict:
            workload = labels.get(WORKLOAD_LABEL)
            allowed = self._allowlisted(labels) if self.allowlist else ()
        else:
            workload, allowed = None, ()
        workload = intern(workload) if type(workload) is str and workload else key[0]
        if fits:  # Status forbids unknown fields: its tuple is the whole status
            same_status = skey == t.status_key
        elif type(status) is dict:
            skey = tuple(map(status.get, STATUS_FIELDS))
            same_status = skey == t.status_key and status.keys() <= _STATUS_SET
        else:
            status = skey = None
            same_status = t.status_key is None
        old = t.state
        # The API server bumps metadata.generation on every spec change (status is a
        # subresource), so while it stays the same the spec is the one already read: most
        # watch events are the agent's status writes.
        spec = None
        if old is None or mgen is None or mgen != t.spec_mgen:
            spec = self._spec(t, key, mgen, _spec_of(obj), workload, first_sight, now)
        elif workload == old.workload and allowed == old.labels:
            if same_status:
                return key  # nothing this exporter reads has changed (a resync, a relist)
            if self.touched is not None:
                self.touched.add(key)
            prev = t.status_key
            if (self.status_fast_path and skey is not None and prev is not None
                    and status is not None and _measured(skey) == _measured(prev)):
                self._status_only(key, t, old, status, skey, workload, fits)
                return key
        if self.touched is not None:
            self.touched.add(key)
        if not same_status:
            self._validate_status(t, status, skey, workload, fits)
        if skey is None:
            observed = ready_at = ack = None
        else:
            observed, _, ready_at, _, _, _, _, ack, _ = skey
            if not fits:
                observed = _int(observed)

        # conformance
        generation = t.gen
        ahead = False
        if observed is not None:
            if t.observed is not None and observed < t.observed:
                self.obs.violation(workload, "observed_generation_regressed")
            ahead = generation is not None and observed > generation
        if ahead != t.ahead:
            if ahead:  # counted when it starts, not on every write while it lasts
                self.obs.violation(workload, "observed_generation_ahead")
            t.ahead = ahead
        agent, accepting, activity, seq = self._agent_fields(t, skey, workload, fits)

        if t.pending or (generation is not None and generation > (observed or 0)):
            self._generations(t, obj, workload, generation, observed, first_sight, now)
        elif observed is not None:
            t.observed = observed
        if not ready_at:
            ready = False
        else:
            ready = t.ready_seen or self._readiness(t, obj, ready_at, workload)
        alloc_id = t.alloc_id
        if ack is not None:
            self._ack(t, ack, workload, first_sight, now)

        draining = t.draining
        if draining != "none":
            phase = "draining"
        elif alloc_id is not None:
            phase = "allocated"
        elif ready:
            phase = "ready"
        else:
            phase = "starting"
        if old is not None and old.phase == phase:
            since = old.phase_since
        elif first_sight:  # the spec was read just above (first sight always reads it)
            since = _phase_start(phase, _created_of(obj), spec if type(spec) is dict else {},
                                 skey) or now
            since = min(since, now)
        else:
            since = now

        lag = max(0, generation - (observed or 0)) if generation is not None else 0
        if allowed:  # kept in the state: the object's own copy only when they changed
            allowed = old.labels if old is not None and allowed == old.labels else (
                self._shared(allowed))
        state = _new_state(SignalState, (
            workload,
            t.unit_id,
            t.ukey,
            agent,
            allowed,
            lag,
            min(t.pending.values()) if lag > 0 and t.pending else None,
            1 if ready else 0,
            accepting,
            activity,
            draining,
            1 if alloc_id is not None and ack != alloc_id else 0,
            seq or 0,
            t.spec_valid,
            t.status_valid,
            1 if lag > 0 and not t.spec_valid else 0,
            phase,
            since,
        ))
        if state != old:
            if old is None or old.phase != phase or old.phase_since != since or (
                    old.workload != workload):
                self._index(key, old, state)
            t.state = state
            self.obs.state(key, old, state)
            tap = self.tap
            if tap is not None and (old is None or old[:2] != state[:2]
                                    or old.labels != state.labels):
                if old is not None and old[:2] != state[:2]:
                    tap.forgotten(key, old)  # its unit or workload changed: not that one's now
                tap.known(key, state)
        return key

    # -- pieces of an upsert -----------------------------------------------------------------

    def _status_only(self, key: Key, t: _Tracked, old: SignalState,
                     status: dict[str, Any] | Status, skey: tuple[Any, ...], workload: str,
                     fits: bool) -> None:
        """A status write that moved none of observedGeneration, signalledReady and
        allocationAck, under an unchanged spec and labels: the agent's routine writes (seq,
        accepting, activity). Nothing is measured and the phase stays, so only the status's own
        fields of the state change; the same result as the full path (a test compares them)."""
        self._validate_status(t, status, skey, workload, fits)
        fields = list(old)
        fields[_AGENT], fields[_ACCEPTING], fields[_ACTIVITY], seq = self._agent_fields(
            t, skey, workload, fits)
        fields[_SEQ] = seq or 0
        fields[_STATUS_VALID] = t.status_valid
        state = _new_state(SignalState, fields)
        if state != old:
            t.state = state
            self.obs.state(key, old, state)

    def _agent_fields(self, t: _Tracked, skey: tuple[Any, ...] | None,
                      workload: str, fits: bool) -> tuple[str, int, str, int | None]:
        """The status fields the agent moves on its routine writes, as exported (agent
        version, accepting, activity, seq); an agent restart shows as seq going back. `fits`:
        the status was decoded typed (`signal.Status`), its integers already bounded."""
        if skey is None:
            return "", 0, "none", None
        _, agent, _, accepting, activity, _, _, _, seq = skey
        if (seq is not None) if fits else (_int(seq) is not None):
            if t.seq is not None and seq < t.seq:
                self.obs.violation(workload, "agent_restart")
            t.seq = seq
        else:
            seq = None
        return (intern(agent) if type(agent) is str else "", 1 if accepting is True else 0,
                activity if activity == "idle" or activity == "busy" else "none", seq)

    def _spec(self, t: _Tracked, key: Key, mgen: Any, spec: Any, workload: str,
              first_sight: bool, now: float) -> Any:
        """Everything read from the spec, once per generation of it; returns the spec."""
        valid = 1 if is_valid_unit_signal_spec(spec) else 0
        if not valid:
            self.obs.violation(workload, "spec_schema")
        t.spec_valid, t.spec_mgen = valid, mgen
        given, spec = spec, spec if type(spec) is dict else {}
        alloc = spec.get("allocation")
        if type(alloc) is not dict:
            alloc = {}
        gen, agen = spec.get("generation"), alloc.get("generation") if alloc else None
        at = alloc.get("allocatedAt") if alloc else None
        fits = type(gen) is not int or INT_MIN <= gen <= INT_MAX
        # _out_of_range inline (100k objects a sync): a parse only for a time it cannot place.
        if not fits or (type(agen) is int and not INT_MIN <= agen <= INT_MAX) or (
                type(at) is str and not "1971" < at < "2262" and _out_of_range(None, None, at)):
            # Read as absent: nothing measured from it, never an error later (model/ranges.py).
            self.obs.violation(workload, "out_of_range")
        t.gen = gen if fits and type(gen) is int else None
        t.unit_id = _str(spec.get("unitId"))
        ukey = _str(spec.get("key"))
        t.ukey = key[1] if ukey == key[1] else ukey  # nearly always the name: share it
        draining = spec.get("draining")
        t.draining = draining if type(draining) is str and draining in DRAIN_REASONS else "none"
        alloc_id = alloc.get("id")
        alloc_id = t.alloc_id = alloc_id if type(alloc_id) is str and alloc_id else None
        allocs = t.allocs
        if alloc_id is not None and (allocs is None or alloc_id not in allocs):
            if allocs is None:
                allocs = t.allocs = {}
            start = _seconds(alloc.get("allocatedAt"))
            if start is None and not first_sight:
                start = now
            allocs[alloc_id] = [start, False]
            if len(allocs) > ALLOCATION_MEMORY:
                del allocs[next(iter(allocs))]
        return given

    def _validate_status(self, t: _Tracked, status: dict[str, Any] | Status | None,
                         skey: tuple[Any, ...] | None, workload: str, fits: bool) -> None:
        """Once per distinct status: `skey` is its fields' values in STATUS_FIELDS order.
        `fits`: decoded typed (`signal.Status`), so its integers are within the model's and
        only its times are checked here (a string comparison for years 1971-2261)."""
        if status is None:
            t.status_key, t.status_valid = None, 1
            return
        if isinstance(status, Status):
            status = _asdict(status)  # every field, absent ones null
        elif len(status) < len(STATUS_FIELDS):
            # JSON merge patch deletes a key patched to null: the API server cannot keep the
            # contract's "present and null", so an absent field counts as null.
            full = _NULLS.copy()
            full.update(status)
            status = full
        valid = 1 if is_valid_unit_signal_status(status) else 0
        if not valid:
            self.obs.violation(workload, "status_schema")
        if skey is None:
            out = False
        elif fits:
            ready, since, shut = skey[2], skey[5], skey[6]
            out = ((ready is not None and not "1971" < ready < "2262")
                   or (since is not None and not "1971" < since < "2262")
                   or (shut is not None and not "1971" < shut < "2262")) and _out_of_range(
                       None, None, ready, since, shut)
        else:
            out = _out_of_range(*_STATUS_VALUES(skey))
        if out:
            # Read as absent (null): nothing measured from it (model/ranges.py).
            self.obs.violation(workload, "out_of_range")
        if skey is not None:
            # Kept until the next status, for each of 100k objects: the agent's version and its
            # activity are a few words, and an acknowledged allocation is the spec's own id, so
            # keep one copy of each (equal values: the comparisons are unchanged).
            obs, agent, ready, acc, act, since, shut, ack, seq = skey
            skey = (obs, intern(agent) if type(agent) is str else agent, ready, acc,
                    intern(act) if type(act) is str else act, since, shut,
                    t.alloc_id if ack is not None and ack == t.alloc_id else ack, seq)
        t.status_key, t.status_valid = skey, valid

    def _generations(self, t: _Tracked, obj: Any, workload: str,
                     generation: int | None, observed: int | None, first_sight: bool,
                     now: float) -> None:
        eff = observed if observed is not None else 0
        pending = t.pending
        if generation is not None and generation > eff and (
                not pending or generation > max(pending)):
            appeared = now
            if first_sight:
                written = _spec_written_at(_managed_of(obj))
                if written is not None:
                    appeared = min(written, now)
            if pending is None:
                pending = t.pending = {}
            pending[generation] = appeared
            if self.tap is not None and t.unit_id:
                self.tap.generation(workload, t.unit_id, "written", generation, appeared)
        if observed is not None:
            if pending:
                done = [g for g in pending if g <= observed]
                if done and self.tap is not None and t.unit_id:
                    self.tap.generation(workload, t.unit_id, "observed", observed, now)
                for g in done:
                    waited = now - pending.pop(g)
                    if waited < 0:
                        self.obs.skew(workload, "generation_observe")
                    else:
                        self.obs.generation_observed(workload, waited)
            t.observed = observed
        if generation is not None and pending:
            for g in [g for g in pending if g > generation]:
                del pending[g]  # the spec went back: that generation will not come

    def _readiness(self, t: _Tracked, obj: Any, ready: Any, workload: str) -> bool:
        """The first status with `signalledReady`: measured once, from the object's clocks."""
        ready_at = _ns(ready)
        if ready_at is None:
            return True
        t.ready_seen = True
        created = _ns(_created_of(obj))
        if created is not None:
            if ready_at < created:
                self.obs.skew(workload, "ready")
            else:
                self.obs.ready(workload, (ready_at - created) / 1e9)
        return True

    def _ack(self, t: _Tracked, ack: Any, workload: str, first_sight: bool,
             now: float) -> None:
        if type(ack) is not str or not ack:
            return
        allocs = t.allocs
        entry = allocs.get(ack) if allocs else None
        if entry is None:
            if t.bad_acks is None:
                t.bad_acks = set()
            if ack not in t.bad_acks:
                t.bad_acks.add(ack)
                self.obs.violation(workload, "unknown_allocation_ack")
        elif not entry[1]:
            entry[1] = True
            start = entry[0]
            if start is not None and not first_sight:
                if now < start:
                    self.obs.skew(workload, "allocation_ack")
                else:
                    self.obs.allocation_ack(workload, now - start)

    def _allowlisted(self, labels: Any) -> tuple[tuple[str, str], ...]:
        if type(labels) is not dict:
            return ()
        out = []
        for name in self.allowlist:
            v = labels.get(name)
            if type(v) is str:
                out.append((name, intern(v)))
        return tuple(out)

    def _shared(self, allowed: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        """Objects of a team share their allowlisted labels: one tuple each, not one an object
        (~100 B of 100k objects' memory). Bounded, whatever the labels hold."""
        shared = self._shared_labels.get(allowed)
        if shared is None:
            if len(self._shared_labels) >= 4096:
                self._shared_labels.clear()
            shared = self._shared_labels[allowed] = allowed
        return shared

    # -- bookkeeping ------------------------------------------------------------------------

    def _index(self, key: Key, old: SignalState | None, new: SignalState | None) -> None:
        if old is not None:
            members = self.phases[old.workload][old.phase]
            members.pop(key, None)
        if new is not None:
            by_phase = self.phases.get(new.workload)
            if by_phase is None:
                by_phase = self.phases[new.workload] = {p: {} for p in PHASES}
            by_phase[new.phase][key] = new.phase_since

    def _forget(self, key: Key) -> None:
        t = self.objects.pop(key)
        if self.touched is not None:
            self.touched.add(key)
        if t.state is not None:
            self._index(key, t.state, None)
            self.obs.state(key, t.state, None)
            if self.tap is not None:
                self.tap.forgotten(key, t.state)

    def workloads(self) -> Iterable[str]:
        return self.phases.keys()

    # -- memory: what a checkpoint keeps ----------------------------------------------------

    def track(self) -> None:
        """Record changes from now on (`touched`); every object held now counts as changed."""
        self.touched = set(self.objects)

    def taken(self) -> None:
        """The checkpoint holds every object's memory as it is now: nothing is changed."""
        self.touched = set()

    def take_memory(self, limit: int | None = None) -> list[tuple[Key, list[Any] | None]]:
        """Each object whose memory changed since the last call (at most `limit` of them),
        with its record (`memory`), or None when it is gone; from then on those taken no
        longer count as changed."""
        touched, objects = self.touched, self.objects
        if not touched:
            return []
        if limit is None or limit >= len(touched):
            keys = list(touched)
            touched.clear()
        else:
            keys = [touched.pop() for _ in range(limit)]
        out = []
        for key in keys:
            t = objects.get(key)
            out.append((key, None if t is None or t.state is None else _record(t)))
        return out

    def memory(self) -> list[tuple[Key, list[Any]]]:
        """Every object's record: plain data (JSON, with integers of any size), which `restore`
        takes back. Version MEMORY_VERSION."""
        return [(key, _record(t)) for key, t in self.objects.items() if t.state is not None]

    def restore(self, records: Iterable[tuple[Key, list[Any]]]) -> list[Key]:
        """Objects remembered by an earlier process, before the first (re)list: each is known
        again as it was, its state handed to the observer (its per-object series return), and
        nothing is measured. A relist then measures only what changed. Returns the keys of the
        records that could not be read (each is measured once more if still listed)."""
        bad = []
        for key, rec in records:
            try:
                t = _tracked(rec, self._shared)
            except (ValueError, TypeError, IndexError, KeyError):
                bad.append(key)
                continue
            key = (intern(key[0]), key[1])
            if key in self.objects:
                self._forget(key)
            self.objects[key] = t
            state = t.state
            assert state is not None
            self._index(key, None, state)
            self.obs.state(key, None, state)
            if self.tap is not None:
                self.tap.known(key, state)
        return bad


def _record(t: _Tracked) -> list[Any]:
    """One object's memory as plain data (see `_tracked`). The fields the state repeats
    (unit id, key, draining, spec and status validity) are taken back from it."""
    state = t.state
    assert state is not None
    return [
        t.uid, t.spec_mgen, t.gen, t.alloc_id,
        None if t.status_key is None else list(t.status_key),
        t.observed, t.seq, 1 if t.ahead else 0, 1 if t.ready_seen else 0,
        None if not t.pending else [[g, at] for g, at in t.pending.items()],
        None if not t.allocs else [[a, e[0], 1 if e[1] else 0] for a, e in t.allocs.items()],
        None if not t.bad_acks else sorted(t.bad_acks),
        [*state[:_LABELS], [list(p) for p in state.labels], *state[_LABELS + 1:]],
    ]


def record_workload(rec: Any) -> str | None:
    """The workload of a `memory` record (None: not a record this version reads)."""
    if type(rec) is list and len(rec) == 13:
        fields = rec[-1]
        if type(fields) is list and len(fields) == len(SignalState._fields):
            w = fields[_WORKLOAD]
            return w if type(w) is str else None
    return None


def _tracked(rec: list[Any], shared: Callable[[Labels], Labels]) -> _Tracked:
    """The inverse of `_record`; raises ValueError (or TypeError, IndexError) on a record of
    another form."""
    if type(rec) is not list or len(rec) != 13:
        raise ValueError("not a UnitSignal memory record")
    (uid, mgen, gen, alloc_id, skey, observed, seq, ahead, ready_seen, pending, allocs,
     bad_acks, fields) = rec
    if type(fields) is not list or len(fields) != len(SignalState._fields) or not all(
            type(v) in kinds for v, kinds in zip(fields, _STATE_TYPES, strict=True)) or (
            fields[_PHASE] not in PHASES or fields[_ACTIVITY] not in ACTIVITIES
            or fields[_DRAINING] not in _DRAINING_VALUES):
        raise ValueError("not a UnitSignal state")  # the sink renders these by lookups
    labels = tuple((intern(n), intern(v)) for n, v in fields[_LABELS])
    fields[_LABELS] = shared(labels) if labels else ()
    for i in (_WORKLOAD, _AGENT, _ACTIVITY, _DRAINING, _PHASE):
        fields[i] = intern(fields[i])
    state = _new_state(SignalState, fields)
    t = _Tracked(uid)
    t.state = state
    t.spec_mgen, t.gen, t.alloc_id = mgen, gen, alloc_id
    if skey is not None:
        if len(skey) != len(STATUS_FIELDS):
            raise ValueError("not a UnitSignal status")
        obs, agent, ready, acc, act, since, shut, ack, sq = skey
        skey = (obs, intern(agent) if type(agent) is str else agent, ready, acc,
                intern(act) if type(act) is str else act, since, shut,
                alloc_id if ack is not None and ack == alloc_id else ack, sq)
    t.status_key = skey
    t.observed, t.seq = observed, seq
    t.ahead, t.ready_seen = bool(ahead), bool(ready_seen)
    t.pending = None if pending is None else {int(g): float(at) for g, at in pending}
    t.allocs = None if allocs is None else {
        a: [start, bool(acked)] for a, start, acked in allocs}
    t.bad_acks = None if bad_acks is None else set(bad_acks)
    t.unit_id, t.ukey, t.draining = state.unit_id, state.key, state.draining
    t.spec_valid, t.status_valid = state.spec_valid, state.status_valid
    return t


def workload_of(meta: dict[str, Any], namespace: str) -> str:
    """The `units.zaroz.cloud/workload` label, else the namespace (platform.md)."""
    labels = meta.get("labels")
    workload = labels.get(WORKLOAD_LABEL) if type(labels) is dict else None
    return workload if type(workload) is str and workload else namespace


def _str(v: Any) -> str:
    return v if type(v) is str else ""


def _key_of(obj: Any) -> Key | None:
    if type(obj) is UnitSignal:
        m = obj.metadata
        return None if m.namespace is None or m.name is None else (m.namespace, m.name)
    meta = obj.get("metadata") if type(obj) is dict else None
    if type(meta) is not dict:
        return None
    ns, name = meta.get("namespace"), meta.get("name")
    if type(ns) is not str or type(name) is not str:
        return None
    return (ns, name)


def _spec_of(obj: Any) -> Any:
    """The spec as plain values: a typed object's is decoded here, when it is needed."""
    if type(obj) is UnitSignal:
        return raw_value(obj.spec)
    return obj.get("spec")


def _created_of(obj: Any) -> Any:
    if type(obj) is UnitSignal:
        return obj.metadata.creationTimestamp
    return obj["metadata"].get("creationTimestamp")


def _managed_of(obj: Any) -> Any:
    if type(obj) is UnitSignal:
        return raw_value(obj.metadata.managedFields)
    return obj["metadata"].get("managedFields")


def _phase_start(phase: str, created: Any, spec: dict[str, Any],
                 skey: tuple[Any, ...] | None) -> float | None:
    """On first sight, when the object entered its phase, from its own timestamps (`skey`: the
    status's fields in STATUS_FIELDS order)."""
    if phase == "starting":
        return _seconds(created)
    if phase == "ready":
        return _seconds(skey[_READY_AT]) if skey else None
    if phase == "allocated":
        alloc = spec.get("allocation")
        return _seconds(alloc.get("allocatedAt")) if type(alloc) is dict else None
    return _seconds(skey[_SHUTDOWN_AT]) if skey else None

