"""Wires each workload's lifecycle model to its metrics: the one path replay and live share."""

from __future__ import annotations

import platform
from collections.abc import Callable

from exporter import __version__
from exporter.model.observations import Observer
from exporter.model.workload import WorkloadLog
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.workload import WorkloadMetrics

DEFAULT_IDLE_SECONDS = 24 * 3600


class Pipeline:
    def __init__(
        self,
        registry: Registry | None = None,
        *,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        max_pending: int = 10_000,
        observer_factory: Callable[[Registry, str], Observer] = WorkloadMetrics,
    ) -> None:
        self.registry = registry if registry is not None else Registry()
        self.idle_ns = int(idle_seconds * 1e9)
        self.max_pending = max_pending
        self.observer_factory = observer_factory
        self.logs: dict[str, WorkloadLog] = {}
        build = self.registry["zaroz_exporter_build_info"]
        build.labels(__version__, platform.python_version()).set(1)

    def workload(self, name: str, after: int = 0) -> WorkloadLog:
        log = self.logs.get(name)
        if log is None:
            log = self.logs[name] = WorkloadLog(
                self.observer_factory(self.registry, name),
                after=after,
                max_pending=self.max_pending,
                idle_ns=self.idle_ns,
            )
            self._pull(name, log)
        return log

    def _pull(self, name: str, log: WorkloadLog) -> None:
        """Model state that changes on nearly every event is read at scrape time instead."""
        r, key = self.registry, (name,)
        r["zaroz_events_last_seq"].callback(key, lambda: log.applied_through)
        r["zaroz_events_last_occurred_timestamp_seconds"].callback(key, lambda: log.clock / 1e9)
        r["zaroz_events_pending"].callback(key, lambda: len(log.pending))
        r["zaroz_workload_units_tracked"].callback(key, lambda: len(log.units))
        r["zaroz_workload_units_expired_total"].callback(key, lambda: log.expired)

    def expire(self, now_ns: int) -> None:
        for log in self.logs.values():
            log.expire(now_ns)
