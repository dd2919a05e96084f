"""Wires the UnitSignal model to its metrics: the handler the Kubernetes reflector feeds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from exporter.model.unitsignals import UnitSignalModel, workload_of
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.unitsignals import UnitSignalMetrics
from exporter.sources.kube.handler import Key, object_key


def build_cluster(
    registry: Registry, labels_allowlist: Iterable[str] = (),
    clock: Callable[[], float] = time.time,
) -> tuple[UnitSignalModel, UnitSignalMetrics]:
    sink = UnitSignalMetrics(registry, clock)
    model = UnitSignalModel(sink, labels_allowlist)
    sink.attach(model.phases)
    return model, sink


class NamespaceHandler:
    """The reflector of one namespace (or of all, None) feeding the shared model: its relists
    reconcile only its own namespace, and objects of workloads this shard does not own are
    treated as absent."""

    def __init__(self, model: UnitSignalModel, namespace: str | None,
                 owns: Callable[[str], bool] | None = None) -> None:
        self.model = model
        self.namespace = namespace
        self.owns = owns

    def _mine(self, obj: Any) -> bool:
        if self.owns is None:
            return True
        meta = obj.get("metadata") if type(obj) is dict else None
        if type(meta) is not dict or type(meta.get("namespace")) is not str:
            return True  # the model counts it as malformed
        return self.owns(workload_of(meta, meta["namespace"]))

    def replace(self, objects: list[dict[str, Any]], now: float) -> None:
        self.model.replace([o for o in objects if self._mine(o)], now, self.namespace)

    def list_page(self, objects: list[dict[str, Any]], now: float) -> list[Key]:
        """One page of a (re)list, applied as it arrives (see Reflector); returns the keys of
        its objects, the model's own tuples (the reflector would otherwise make its own)."""
        upsert, delete, mine = self.model.upsert, self.model.delete, self._mine
        keys: list[Key] = []
        add = keys.append
        for obj in objects:
            if mine(obj):
                key = upsert(obj, now)
                if key is not None and key[1]:
                    add(key)
                    continue
            else:  # another shard's (its workload label may have just moved it there)
                delete(obj, now)
            key = object_key(obj)
            if key is not None:
                add(key)
        return keys

    def list_done(self, listed: set[tuple[str, str]], now: float) -> None:
        """The list is complete: what it did not hold was deleted meanwhile."""
        self.model.reconcile(listed, self.namespace)

    def upsert(self, obj: dict[str, Any], now: float) -> None:
        if self._mine(obj):
            self.model.upsert(obj, now)
        else:  # its workload label moved it to another shard
            self.model.delete(obj, now)

    def delete(self, obj: dict[str, Any], now: float) -> None:
        self.model.delete(obj, now)
