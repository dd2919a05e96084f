"""Wires the UnitSignal model to its metrics: the handler the Kubernetes reflector feeds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from exporter.model.unitsignals import UnitSignalModel
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.unitsignals import UnitSignalMetrics


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
    reconcile only its own namespace."""

    def __init__(self, model: UnitSignalModel, namespace: str | None) -> None:
        self.model = model
        self.namespace = namespace

    def replace(self, objects: list[dict[str, Any]], now: float) -> None:
        self.model.replace(objects, now, self.namespace)

    def upsert(self, obj: dict[str, Any], now: float) -> None:
        self.model.upsert(obj, now)

    def delete(self, obj: dict[str, Any], now: float) -> None:
        self.model.delete(obj, now)
