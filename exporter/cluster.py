"""Wires the UnitSignal model to its metrics: the handler the Kubernetes reflector feeds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

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
