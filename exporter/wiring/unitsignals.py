"""Wires the UnitSignal model to its metrics: the handler the Kubernetes reflector feeds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from exporter.model.signal import UnitSignal
from exporter.model.unitsignals import WORKLOAD_LABEL, UnitSignalModel, workload_of
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.series import Series
from exporter.sinks.metrics.unitsignals import UnitSignalMetrics
from exporter.sources.kube.handler import Key, object_key


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
