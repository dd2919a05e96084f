"""Wires each workload's lifecycle model to its metrics: the one path replay and live share."""

from __future__ import annotations

import logging
import platform
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from exporter import __version__
from exporter.model.observations import Observer
from exporter.model.workload import WorkloadLog
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.workload import WorkloadMetrics

if TYPE_CHECKING:  # the OpenTelemetry SDK is imported only when traces are on
    from exporter.sinks.traces.otlp import TraceSink

_log = logging.getLogger(__name__)

DEFAULT_IDLE_SECONDS = 24 * 3600
# The families a workload's event log feeds (its own, its tailer's, its webhook deliveries'):
# what goes when a workload leaves the route. The UnitSignal families are the watch's.
EVENT_LOG_GROUPS = frozenset({"lifecycle", "events", "route", "webhook"})


class Pipeline:
    def __init__(
        self,
        registry: Registry | None = None,
        *,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        max_pending: int = 10_000,
        observer_factory: Callable[[Registry, str], Observer] = WorkloadMetrics,
        traces: TraceSink | None = None,
    ) -> None:
        self.registry = registry if registry is not None else Registry()
        self.idle_ns = int(idle_seconds * 1e9)
        self.max_pending = max_pending
        self.observer_factory = observer_factory
        self.logs: dict[str, WorkloadLog] = {}
        # With a checkpoint (`track`): the workloads whose state changed since it last saved,
        # and those dropped since (`drop`: their rows go).
        self.moved: set[str] | None = None
        self.dropped: set[str] = set()
        # Optional: every WorkloadLog's tap feeds its workload's TraceBuilder. Without it the tap
        # stays None, and the model's hot path pays one `is None` per event.
        self.traces = traces
        # The fields whose out-of-range values were logged: once per field per process (each
        # one is counted in zaroz_events_invalid_total{reason="range"}).
        self.out_of_range_logged: set[str] = set()
        if traces is not None:
            traces.idle_ns = self.idle_ns  # traces end when the model forgets the unit
            traces.register(self.registry)
        build = self.registry.gauge("zaroz_exporter_build_info")
        build.labels(__version__, platform.python_version()).set(1)

    def workload(self, name: str, after: int = 0) -> WorkloadLog:
        log = self.logs.get(name)
        if log is None:
            obs = self.observer_factory(self.registry, name)
            log = self.logs[name] = WorkloadLog(
                obs,
                after=after,
                max_pending=self.max_pending,
                idle_ns=self.idle_ns,
            )
            bind = getattr(obs, "bind_clock", None)
            if bind is not None:  # exemplars are stamped with the event being applied
                bind(lambda: log.last_at)
            bind_spans = getattr(obs, "bind_spans", None)
            if bind_spans is not None:  # and name the span each measurement is
                bind_spans(log.span_of)
            if self.traces is not None:
                log.tap = self.traces.builder(name)
            log.rejected = lambda seq, field, value: self._out_of_range(name, seq, field, value)
            if self.moved is not None:
                log.track(name, self.moved)
            self._pull(name, log)
        return log

    def _out_of_range(self, workload: str, seq: int, field: str, value: Any) -> None:
        """An event refused for a value the exporter cannot hold: logged the first time for
        each field (the counter has every one; the value is the contract's, no user data)."""
        if field in self.out_of_range_logged:
            return
        self.out_of_range_logged.add(field)
        if type(value) is int and value.bit_length() > 128:
            shown = f"an integer of {value.bit_length()} bits"
        else:
            shown = str(value)[:64]
        _log.warning("event refused: a value the exporter cannot hold (counted in "
                     "zaroz_events_invalid_total{reason=\"range\"}; logged once per field)",
                     extra={"workload": workload, "seq": seq, "field": field, "value": shown})

    def track(self) -> set[str]:
        """Record from now on what changes, for incremental checkpoints (everything held now
        counts as changed); returns the set of workloads whose state moved."""
        if self.moved is None:
            self.moved = set()
            for name, log in self.logs.items():
                log.track(name, self.moved)
            if self.traces is not None:
                self.traces.track(self.moved)
        return self.moved

    def drop(self, names: Collection[str], reason: str, *, every_group: bool = False) -> int:
        """Forget these workloads: their logs (cursor, units, waiting events), open traces
        and the series labelled with them (of the event-log families; of every family with
        `every_group`); the next checkpoint deletes their rows. One seen again later starts as
        new, from the beginning of its log, its counters from zero. Counted by `reason`;
        returns how many were known."""
        known = 0
        for name in names:
            known += self.logs.pop(name, None) is not None
            if self.traces is not None:
                self.traces.builders.pop(name, None)
            if self.moved is not None:
                self.moved.discard(name)
                self.dropped.add(name)
        self.registry.remove_workloads(set(names), None if every_group else EVENT_LOG_GROUPS)
        self.registry.counter("zaroz_exporter_workloads_dropped_total").labels(reason).inc(
            len(names))
        return known

    def _pull(self, name: str, log: WorkloadLog) -> None:
        """Model state that changes on nearly every event is read at scrape time instead."""
        r, key = self.registry, (name,)
        r.gauge("zaroz_events_last_seq").callback(key, lambda: log.applied_through)
        r.gauge("zaroz_events_last_occurred_timestamp_seconds").callback(
            key, lambda: log.clock / 1e9)
        r.gauge("zaroz_events_pending").callback(key, lambda: len(log.pending))
        r.gauge("zaroz_workload_units_tracked").callback(key, lambda: len(log.units))
        r.counter("zaroz_workload_units_expired_total").callback(key, lambda: log.expired)

    def expire_workload(self, name: str, now_ns: int) -> None:
        """One workload's idle units (replay runs each on its own event clock)."""
        self.logs[name].expire(now_ns)
        self.expire_traces(name, now_ns)

    def expire_traces(self, name: str, now_ns: int) -> None:
        """The traces of the units the model forgot at `now_ns` (with traces on)."""
        if self.traces is not None:
            self.traces.builder(name).expire(now_ns)
