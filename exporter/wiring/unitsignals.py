"""Wires the UnitSignal model to its metrics (the handler the Kubernetes reflector feeds) and
to the checkpoint (the model's memory of what it measured)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from exporter.model.signal import UnitSignal
from exporter.model.unitsignals import (
    MEMORY_VERSION,
    WORKLOAD_LABEL,
    UnitSignalModel,
    record_workload,
    workload_of,
)
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.series import Series
from exporter.sinks.metrics.unitsignals import UnitSignalMetrics
from exporter.sources.kube.handler import Key, object_key

log = logging.getLogger(__name__)


def build_cluster(
    registry: Registry, labels_allowlist: Iterable[str] = (),
    clock: Callable[[], float] = time.time, traces: Any = None,
) -> tuple[UnitSignalModel, UnitSignalMetrics]:
    """`traces` (a TraceSink): the units' traces also carry their UnitSignals (join.py)."""
    sink = UnitSignalMetrics(registry, clock)
    model = UnitSignalModel(sink, labels_allowlist)
    sink.attach(model.phases)
    if traces is not None:
        from exporter.sinks.traces.join import ClusterJoin

        model.tap = ClusterJoin(traces)
    return model, sink


class NamespaceHandler:
    """The reflector of one namespace (or of all, None) feeding the shared model: its relists
    reconcile only its own namespace, and objects of workloads this shard does not own are
    treated as absent.

    Ownership is decided from an object's metadata alone (the workload label, else the
    namespace), before anything else of it is decoded: a typed object's spec and status stay
    undecoded bytes when it is another shard's. `decoded` counts both kinds (metadata-only,
    whole object) when given: the counter series of `zaroz_kube_objects_decoded_total`."""

    def __init__(self, model: UnitSignalModel, namespace: str | None,
                 owns: Callable[[str], bool] | None = None,
                 decoded: tuple[Series, Series] | None = None) -> None:
        self.model = model
        self.namespace = namespace
        self.owns = owns
        self.decoded = decoded
        self._owned: dict[str, bool] = {}

    def _mine(self, obj: Any) -> bool:
        owns = self.owns
        if owns is None:
            return True
        if type(obj) is UnitSignal:
            m = obj.metadata
            ns, labels = m.namespace, m.labels
            if ns is None:
                return True  # the model counts it as malformed
            workload = (labels.get(WORKLOAD_LABEL) or ns) if labels else ns
            mine = self._owned.get(workload)
            if mine is None:  # workloads are few: the hash once each, not once an event
                if len(self._owned) >= 65536:
                    self._owned.clear()  # bounded, whatever the labels hold
                mine = self._owned[workload] = owns(workload)
            return mine
        meta = obj.get("metadata") if type(obj) is dict else None
        if type(meta) is not dict or type(meta.get("namespace")) is not str:
            return True  # the model counts it as malformed
        return owns(workload_of(meta, meta["namespace"]))

    def _count(self, foreign: int, own: int) -> None:
        if self.decoded is not None:
            if foreign:
                self.decoded[0].inc(foreign)
            if own:
                self.decoded[1].inc(own)

    def list_page(self, objects: list[Any], now: float) -> list[Key]:
        """One page of a (re)list, applied as it arrives (see Reflector); returns the keys of
        its objects, the model's own tuples (the reflector would otherwise make its own)."""
        upsert, delete, mine = self.model.upsert, self.model.delete, self._mine
        keys: list[Key] = []
        add = keys.append
        foreign = 0
        for obj in objects:
            if mine(obj):
                key = upsert(obj, now)
                if key is not None and key[1]:
                    add(key)
                    continue
            else:  # another shard's (its workload label may have just moved it there)
                foreign += 1
                delete(obj, now)
            key = object_key(obj)
            if key is not None:
                add(key)
        self._count(foreign, len(objects) - foreign)
        return keys

    def list_done(self, listed: set[tuple[str, str]], now: float) -> None:
        """The list is complete: what it did not hold was deleted meanwhile."""
        self.model.reconcile(listed, self.namespace)

    def upsert(self, obj: Any, now: float) -> None:
        if self.owns is None or self._mine(obj):
            if self.decoded is not None:
                self.decoded[1].inc()
            self.model.upsert(obj, now)
        else:  # another shard's, or its workload label moved it to another shard
            if self.decoded is not None:
                self.decoded[0].inc()
            self.model.delete(obj, now)

    def delete(self, obj: Any, now: float) -> None:
        self.model.delete(obj, now)


class SignalMemory:
    """The UnitSignal model's memory of what it measured, as the checkpoint stores it: one row
    per object this exporter watches and owns (the handler forgets another shard's objects, so
    the model holds none), written when the object's memory changed (`touched`), removed when
    it goes. Restored before the first list, so that the list after a restart measures only
    what changed meanwhile.

    At restore, the records of objects this exporter no longer watches (another shard's now,
    a namespace no longer in --namespace) are dropped, and so are their rows at the next save.
    """

    def __init__(self, model: UnitSignalModel, owns: Callable[[str], bool] | None = None,
                 namespaces: Sequence[str] | None = None) -> None:
        self.model = model
        self.owns = owns
        self.namespaces = frozenset(namespaces) if namespaces else None
        self._gone: list[tuple[str, str]] = []  # dropped at restore: removed at the next save
        self._encode = msgspec.json.Encoder().encode  # integers of any size, as decoded

    def _watched(self, namespace: str, workload: str | None) -> bool:
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return self.owns is None or workload is None or self.owns(workload)

    def restore(self, stored: dict[str, Any]) -> int:
        """The checkpoint's "unitsignals" entry (`Store.read`'s form) into the model; returns
        how many objects are remembered. A record in another form is measured once more."""
        keep: list[tuple[tuple[str, str], list[Any]]] = []
        dropped = 0
        for ns, name, rec in stored["objects"]:
            if self._watched(ns, record_workload(rec)):
                keep.append(((ns, name), rec))
            else:
                dropped += 1
                self._gone.append((ns, name))
        bad = self.model.restore(keep)
        self._gone += bad
        if dropped:
            log.info("UnitSignals of the checkpoint this exporter no longer watches are "
                     "forgotten (another shard's, or outside --namespace)",
                     extra={"unitsignals": dropped})
        if bad:
            log.warning("UnitSignal memory records in a form this version cannot read: those "
                        "objects are measured once more at the next list",
                        extra={"unitsignals": len(bad)})
        return len(keep) - len(bad)

    def track(self) -> None:
        """Every object counts as changed (the next save replaces the store)."""
        self.model.track()

    def taken(self) -> None:
        """The store holds every object's memory as it is now."""
        self.model.taken()

    def left(self) -> int:
        """How many objects' memory changed since the last take."""
        return len(self.model.touched or ())

    def take(self, limit: int | None = None,
             ) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
        """The rows of the objects whose memory changed since the last call (at most `limit`:
        a whole save takes them in slices), and the keys of those gone; O(changes)."""
        rows: list[tuple[str, str, str]] = []
        gone, self._gone = self._gone, []
        encode = self._encode
        for (ns, name), rec in self.model.take_memory(limit):
            if rec is None:
                gone.append((ns, name))
            else:
                rows.append((ns, name, encode(rec).decode()))
        return rows, gone

    def state(self) -> dict[str, Any]:
        """The whole memory in `Store.read`'s form (tests compare the two)."""
        return {"v": MEMORY_VERSION, "objects": sorted(
            [ns, name, rec] for (ns, name), rec in self.model.memory())}
