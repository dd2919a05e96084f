"""The UnitSignal object store behind the emulator, with etcd-like resourceVersion semantics.

One global, strictly increasing revision; every real write takes the next one and is recorded
in a history kept by time (5 minutes by default: kube's watch cache holds ~75 s and etcd
compacts every 5 minutes) and bounded in length (the memory bound). The history serves both
watches resuming from an older revision and consistent paginated lists (the state at revision
R is the current state with the later events undone), so both expire together when R falls out
of the window, as with etcd compaction.

Every stored version is serialised once, when it is written, and reads are served from those
bytes: kube-apiserver does the same (its watch cache keeps each object's encoding), so a LIST
page is a join of cached bytes and a watch event a line around them, not a dump of dicts.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import ChainMap, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from zaroz_sim.kube.select import merge_patch

GROUP = "units.zaroz.cloud"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "UnitSignal"
PLURAL = "unitsignals"
RESOURCE = f"{PLURAL}.{GROUP}"

Obj = dict[str, Any]


class KubeError(Exception):
    """An API error; `status()` is the metav1.Status body the server answers with."""

    def __init__(
        self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = dict(details) if details else None

    def status(self) -> Obj:
        body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": self.message, "reason": self.reason}  # fmt: skip
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def not_found(name: str) -> KubeError:
    details = {"name": name, "group": GROUP, "kind": PLURAL}
    return KubeError(404, "NotFound", f'{RESOURCE} "{name}" not found', details)


def too_old(rv: int, oldest: int) -> KubeError:
    return KubeError(410, "Expired", f"too old resource version: {rv} ({oldest})")


@dataclass(frozen=True, slots=True)
class Event:
    """One write, as bytes: `raw` is the object after it (DELETED: the last state, at the
    delete's rv), `prev_raw` the one before (None for ADDED), the same bytes objects the store
    and the neighbouring events hold. `labels` and `prev_labels` (the objects' own label maps,
    shared) and the key are what a watcher's selectors read; `obj` and `prev` decode on demand.
    Minutes of history at the demo's write rate are tens of thousands of events: keeping a dict
    per version would cost several times the bytes."""

    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    key: str  # "namespace/name", the etcd key order lists use
    raw: bytes
    prev_raw: bytes | None
    labels: Mapping[str, str]
    prev_labels: Mapping[str, str] | None
    at: float = 0.0  # when it was written, on the store's history clock (monotonic seconds)

    @property
    def obj(self) -> Obj:
        return _obj(self.raw)

    @property
    def prev(self) -> Obj | None:
        return None if self.prev_raw is None else _obj(self.prev_raw)


_NO_LABELS: Mapping[str, str] = {}


@dataclass(frozen=True)
class View:
    """The objects at revision `rv`: their keys in order, and each one as a dict and as bytes.
    Read it without awaiting in between: the current view shares the store's live maps."""

    rv: int
    keys: list[str]
    objects: Mapping[str, Obj]
    raw: Mapping[str, bytes]


def _copy(value: Any) -> Any:
    return _obj(orjson.dumps(value))


def _obj(raw: bytes) -> Obj:
    """A stored object, decoded (the store writes only JSON objects)."""
    obj: Obj = orjson.loads(raw)
    return obj


def _encode(obj: Obj) -> bytes:
    """orjson.dumps, copied to a bytes of its own length: orjson (3.8) hands back its whole write
    buffer, 4 KiB for a 1.9 KB object, too much to keep for every object."""
    return bytes(memoryview(orjson.dumps(obj)))


def fields_v1(value: Any) -> Obj:
    """FieldsV1 for a JSON value: maps recurse ("." marks the map itself), the rest are leaves."""
    if not isinstance(value, dict):
        return {}
    return {".": {}} | {f"f:{k}": fields_v1(v) for k, v in value.items()}


def rfc3339_s(t_ns: int) -> str:
    """metadata timestamps: UTC, one-second precision, `Z` (what kube-apiserver writes)."""
    return datetime.fromtimestamp(t_ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ObjectStore:
    """UnitSignal objects keyed "namespace/name", their write history and its listeners."""

    def __init__(
        self,
        *,
        history: int = 100_000,
        history_s: float = 300.0,
        history_clock: Callable[[], float] = time.monotonic,
        clock: Callable[[], int] = time.time_ns,
        start_rv: int = 1,
        seed: int | None = None,
        spec_manager: str = "kernel",
        status_manager: str = "zaroz-agent",
    ) -> None:
        if history < 1:
            raise ValueError("history must keep at least one event")
        if history_s <= 0:
            raise ValueError("history_s must be positive")
        self.clock = clock  # object timestamps (simulated time)
        self.history_max, self.history_s, self.history_clock = history, history_s, history_clock
        self.spec_manager, self.status_manager = spec_manager, status_manager
        self.rv = start_rv
        self.floor = start_rv  # oldest rv a watch or a list snapshot can start from
        self.objects: dict[str, Obj] = {}  # never mutated once written (`raw` must stay true)
        self.raw: dict[str, bytes] = {}  # each object's JSON, serialised by its write
        self._keys: list[str] | None = []  # sorted(objects); None: stale (a create or delete)
        self.history: deque[Event] = deque()
        self.listeners: set[Callable[[Event], None]] = set()
        self._rng = random.Random(seed)

    # -- writes (the simulated kernel and agent) -------------------------------------------------

    def create(
        self,
        namespace: str,
        name: str,
        spec: Mapping[str, Any],
        labels: Mapping[str, str] | None = None,
        status: Mapping[str, Any] | None = None,
        *,
        manager: str | None = None,
    ) -> Obj:
        """POST: status is a subresource, so a given `status` is a second write by the agent."""
        meta: Obj = {"name": name, "namespace": namespace}
        if labels:
            meta["labels"] = dict(labels)
        obj: Obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta,
                    "spec": _copy(dict(spec))}  # fmt: skip
        result = self.add(obj, manager=manager)
        if status is not None:
            result = self.patch_status(namespace, name, dict(status))
        return result

    def add(
        self,
        obj: Obj,
        *,
        manager: str | None = None,
        dry_run: bool = False,
        applied: Obj | None = None,
    ) -> Obj:
        """Store a new object (its metadata.name and .namespace set; `obj` is the store's now):
        the server's metadata (uid, generation 1, creationTimestamp, managedFields) is added.
        `dry_run`: all of it but the write (the object as it would be, without resourceVersion)."""
        user = obj["metadata"]
        name, namespace = user["name"], user["namespace"]
        key = f"{namespace}/{name}"
        if key in self.objects:
            details = {"name": name, "group": GROUP, "kind": PLURAL}
            raise KubeError(409, "AlreadyExists", f'{RESOURCE} "{name}" already exists', details)
        now = rfc3339_s(self.clock())
        meta: Obj = {"name": name, "namespace": namespace,
                     "uid": str(uuid.UUID(int=self._rng.getrandbits(128), version=4)),
                     "resourceVersion": "", "generation": 1, "creationTimestamp": now}  # fmt: skip
        for field in ("labels", "annotations", "finalizers", "ownerReferences"):
            if user.get(field):
                meta[field] = user[field]
        meta["managedFields"] = []
        obj["metadata"] = meta
        self._own(obj, manager or self.spec_manager, None, now, applied)
        if dry_run:
            return obj
        return self._write(key, "ADDED", obj, None)

    def replace(
        self,
        obj: Obj,
        *,
        manager: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        applied: Obj | None = None,
    ) -> Obj:
        """Store a new version of an existing object, prepared by the caller from a copy of the
        current one (`obj` is the store's now). Nothing changed: a no-op (same resourceVersion),
        as kube skips writes that change nothing but managedFields."""
        meta = obj["metadata"]
        key, prev = self._existing(meta["namespace"], meta["name"])
        meta["resourceVersion"] = prev["metadata"]["resourceVersion"]
        meta["managedFields"] = prev["metadata"].get("managedFields", [])
        if obj == prev:
            return _obj(self.raw[key])
        meta["managedFields"] = _copy(meta["managedFields"])
        default = self.status_manager if subresource == "status" else self.spec_manager
        self._own(obj, manager or default, subresource, rfc3339_s(self.clock()), applied)
        if dry_run:
            return obj
        return self._write(key, "MODIFIED", obj, prev)

    def update_spec(
        self, namespace: str, name: str, spec: Mapping[str, Any], *, manager: str | None = None
    ) -> Obj:
        """PUT of the spec: bumps metadata.generation; an identical spec is a no-op (same rv)."""
        key, prev = self._existing(namespace, name)
        spec = _copy(dict(spec))
        if spec == prev["spec"]:
            return _obj(self.raw[key])
        obj = orjson.loads(self.raw[key])
        obj["spec"] = spec
        obj["metadata"]["generation"] += 1
        self._own(obj, manager or self.spec_manager, None, rfc3339_s(self.clock()))
        return self._write(key, "MODIFIED", obj, prev)

    def patch_status(
        self,
        namespace: str,
        name: str,
        merge_patch_body: Mapping[str, Any],
        *,
        manager: str | None = None,
    ) -> Obj:
        """PATCH .../status with a merge patch on status: never bumps generation; no-op if same."""
        key, prev = self._existing(namespace, name)
        status = merge_patch(prev.get("status"), _copy(dict(merge_patch_body)))
        if status == prev.get("status"):
            return _obj(self.raw[key])
        obj = orjson.loads(self.raw[key])
        obj["status"] = status
        self._own(obj, manager or self.status_manager, "status", rfc3339_s(self.clock()))
        return self._write(key, "MODIFIED", obj, prev)

    def set_labels(
        self,
        namespace: str,
        name: str,
        labels: Mapping[str, str] | None,
        *,
        manager: str | None = None,
    ) -> Obj:
        """Replace metadata.labels: a metadata change, so no generation bump."""
        key, prev = self._existing(namespace, name)
        new = dict(labels or {})
        if new == prev["metadata"].get("labels", {}):
            return _obj(self.raw[key])
        obj = orjson.loads(self.raw[key])
        meta = obj["metadata"]
        meta.pop("labels", None)
        if new:
            meta = {k: v for k, v in meta.items() if k != "managedFields"} | {
                "labels": new, "managedFields": meta["managedFields"]}  # fmt: skip
            obj["metadata"] = meta
        self._own(obj, manager or self.spec_manager, None, rfc3339_s(self.clock()))
        return self._write(key, "MODIFIED", obj, prev)

    def delete(self, namespace: str, name: str) -> Obj:
        """DELETE without finalizers: gone at once; the event carries the last state."""
        key, prev = self._existing(namespace, name)
        return self._write(key, "DELETED", orjson.loads(self.raw[key]), prev)

    def expire(self) -> None:
        """Drop the events older than the window (and beyond the length bound): a watch or a
        continue token from before them gets 410 Expired."""
        history, oldest = self.history, self.history_clock() - self.history_s
        while history and (len(history) > self.history_max or history[0].at < oldest):
            self.floor = max(self.floor, history.popleft().rv)

    def compact(self) -> None:
        """Forget the history: resuming watches and old continue tokens now get 410."""
        self.history.clear()
        self.floor = self.rv

    # -- reads -----------------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Obj:
        return _obj(self.get_raw(namespace, name))

    def get_raw(self, namespace: str, name: str) -> bytes:
        return self.raw[self._existing(namespace, name)[0]]

    def events_since(self, rv: int) -> list[Event]:
        """Every event after `rv`; 410 Expired when some of them are no longer retained."""
        self.expire()
        if rv < self.floor:
            raise too_old(rv, self.floor + 1)
        out = []
        for event in reversed(self.history):
            if event.rv <= rv:
                break
            out.append(event)
        out.reverse()
        return out

    def current(self) -> View:
        if self._keys is None:
            self._keys = sorted(self.objects)
        return View(self.rv, self._keys, self.objects, self.raw)

    def snapshot(self, rv: int) -> View:
        """The objects as of revision `rv` (the current ones with later events undone)."""
        undone: dict[str, Event] = {}  # key -> its first event after rv
        for event in reversed(self.events_since(rv)):
            undone[event.key] = event
        objects: dict[str, Obj] = {}
        raw: dict[str, bytes] = {}
        for key, event in undone.items():
            if event.prev_raw is not None:
                objects[key], raw[key] = _obj(event.prev_raw), event.prev_raw
        keys = self.current().keys
        if any(event.type != "MODIFIED" for event in undone.values()):  # created or deleted
            keys = sorted((self.objects.keys() - undone.keys()) | objects.keys())
        if not objects:  # only creations since rv: the live maps hold every listed object
            return View(rv, keys, self.objects, self.raw)
        return View(rv, keys, ChainMap(objects, self.objects), ChainMap(raw, self.raw))

    def items(self) -> Iterator[tuple[str, Obj]]:
        return iter([(key, self.objects[key]) for key in self.current().keys])

    # -- internals -------------------------------------------------------------------------------

    def _existing(self, namespace: str, name: str) -> tuple[str, Obj]:
        key = f"{namespace}/{name}"
        obj = self.objects.get(key)
        if obj is None:
            raise not_found(name)
        return key, obj

    @staticmethod
    def _own(
        obj: Obj, manager: str, subresource: str | None, now: str, applied: Obj | None = None
    ) -> None:
        """Record `manager` as the owner of the part it wrote (spec+labels, or status); with
        `applied` (server-side apply: the fields of its configuration), as an Apply."""
        operation = "Update" if applied is None else "Apply"
        if applied is not None:
            fields = applied
        elif subresource == "status":
            fields = {"f:status": fields_v1(obj.get("status", {}))}
        else:
            fields = {}
            if obj["metadata"].get("labels"):
                labels: Obj = {f"f:{k}": {} for k in obj["metadata"]["labels"]}
                fields["f:metadata"] = {"f:labels": {".": {}} | labels}
            fields["f:spec"] = fields_v1(obj["spec"])
        entry: Obj = {"manager": manager, "operation": operation, "apiVersion": API_VERSION,
                      "time": now, "fieldsType": "FieldsV1", "fieldsV1": fields}  # fmt: skip
        if subresource is not None:
            entry["subresource"] = subresource
        entries = obj["metadata"]["managedFields"]
        for i, old in enumerate(entries):
            same = (old["manager"], old.get("subresource")) == (manager, subresource)
            if same and old["operation"] == operation:
                entries[i] = entry
                return
        entries.append(entry)

    def _write(self, key: str, type_: str, obj: Obj, prev: Obj | None) -> Obj:
        """Store `obj` (which no one may mutate afterwards) and serialise it, once."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        raw = _encode(obj)
        prev_raw = None if prev is None else self.raw[key]
        if type_ == "DELETED":
            del self.objects[key], self.raw[key]
        else:
            self.objects[key], self.raw[key] = obj, raw
        if type_ != "MODIFIED":
            self._keys = None
        labels = obj["metadata"].get("labels") or _NO_LABELS
        prev_labels = None if prev is None else prev["metadata"].get("labels") or _NO_LABELS
        event = Event(self.rv, type_, key, raw, prev_raw, labels, prev_labels,
                      self.history_clock())  # fmt: skip
        self.history.append(event)
        self.expire()
        for listener in list(self.listeners):
            listener(event)
        return _obj(raw)
