"""The lifecycle model's observations for one workload, as catalog metrics.

Series are resolved once per workload (or per label value on first use), so an observation is an
attribute access and an increment.

The headline histograms carry exemplars (OpenMetrics only): the unit's trace id, the id of the
span the duration is (`starting`, `allocation`, `draining`), the duration and the occurred_at
of the event that ended it. Always, traces on or off: trace and span ids are derived from the
unit id and the event log (`model.traceids`), so an exemplar is valid before its trace exists,
and a `replay --otlp-endpoint` of the same log later exports exactly the spans it names.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter import vocabulary
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.series import CounterSeries

EXIT_CODES = frozenset(vocabulary.EXIT_CODES)
REASON_LIMIT = 20  # distinct failure/destroy reasons kept per workload; the rest are `other`


def _reason_ok(r: str) -> bool:
    return 0 < len(r) <= 64 and r.isprintable()


class BoundedLabel:
    """First-come label values up to a limit, then `other`: bounded series from free text."""

    def __init__(self, limit: int = REASON_LIMIT) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self.seen:
            return value
        if len(self.seen) < self.limit and _reason_ok(value):
            self.seen.add(value)
            return value
        return vocabulary.OTHER


def _no_clock() -> str:
    return ""


def _no_span(unit_id: str, kind: str) -> str | None:
    return None


class WorkloadMetrics:
    """Implements model.observations.Observer for one workload."""

    def __init__(self, registry: Registry, workload: str) -> None:
        w = workload
        r = registry
        self.workload = w
        self._at: Callable[[], str] = _no_clock
        self._span: Callable[[str, str], str | None] = _no_span
        self._events = r.counter("zaroz_events_total")
        self._event_series: dict[str, CounterSeries] = {}
        self._dup = r.counter("zaroz_events_duplicate_total")
        self._refetched = r.counter("zaroz_events_refetched_total")
        self._pings = r.counter("zaroz_webhook_pings_total")
        self._invalid = r.counter("zaroz_events_invalid_total")
        self._gaps = r.counter("zaroz_events_gaps_total").labels(w)
        self._missing = r.counter("zaroz_events_missing_total").labels(w)
        self._skew = r.counter("zaroz_events_clock_skew_total")
        self._ready = r.histogram("zaroz_unit_ready_seconds").labels(w)
        self._ack = r.histogram("zaroz_unit_allocation_ack_seconds").labels(w)
        self._drain = r.histogram("zaroz_unit_drain_seconds")
        allocs, startups = r.counter("zaroz_unit_allocations_total"), r.counter(
            "zaroz_unit_startups_total")
        self._allocs = {o: allocs.labels(w, o) for o in vocabulary.ALLOCATION_OUTCOMES}
        self._startups = {o: startups.labels(w, o) for o in vocabulary.STARTUP_OUTCOMES}
        self._exits = r.counter("zaroz_unit_exits_total")
        self._failures = r.counter("zaroz_unit_failures_total")
        self._destroyed = r.counter("zaroz_unit_destroyed_total")
        self._failure_reason = BoundedLabel()
        self._destroy_reason = BoundedLabel()
        self._desired = r.gauge("zaroz_workload_desired_units")
        for reason in vocabulary.INVALID_REASONS:
            self._invalid.labels(w, reason)
        for m in vocabulary.SKEW_MEASUREMENTS:
            self._skew.labels(w, m)
        for source in vocabulary.EVENT_SOURCES:  # at 0 from the start, so rates work at once
            self._dup.labels(w, source)
            self._refetched.labels(w, source)

    def label_state(self) -> dict[str, list[str]]:
        """The first-come reason sets: restored with the counters, so a restart admits exactly
        the reasons an uninterrupted run would (checkpoint)."""
        return {"failure_reasons": sorted(self._failure_reason.seen),
                "destroy_reasons": sorted(self._destroy_reason.seen)}

    def restore_label_state(self, state: dict[str, list[str]]) -> None:
        self._failure_reason.seen = set(state.get("failure_reasons", ()))
        self._destroy_reason.seen = set(state.get("destroy_reasons", ()))

    def bind_clock(self, at: Callable[[], str]) -> None:
        """`at()` gives the occurred_at of the event being applied (the exemplars' timestamp);
        the pipeline binds it to its WorkloadLog, since the Observer calls carry no time."""
        self._at = at

    def bind_spans(self, span_of: Callable[[str, str], str | None]) -> None:
        """`span_of(unit id, kind)`: the discriminator of the span a measurement of the unit
        is (`WorkloadLog.span_of`), asked as the model reports it."""
        self._span = span_of

    def applied(self, type_label: str, seq: int) -> None:
        s = self._event_series.get(type_label)
        if s is None:
            s = self._event_series[type_label] = self._events.labels(
                self.workload, type_label
            )
        s.inc()

    def duplicate(self, source: str) -> None:
        self._dup.labels(self.workload, source).inc()

    def refetched(self, source: str) -> None:
        self._refetched.labels(self.workload, source).inc()

    def invalid(self, reason: str) -> None:
        self._invalid.labels(self.workload, reason).inc()

    def gap(self, first: int, last: int) -> None:
        self._gaps.inc()
        self._missing.inc(last - first + 1)

    def skew(self, measurement: str) -> None:
        self._skew.labels(self.workload, measurement).inc()

    def ready(self, unit_id: str, ns: int) -> None:
        self._ready.observe_exemplar(ns, self.workload, unit_id, self._at(), "starting",
                                     self._span(unit_id, "starting"))

    def startup(self, unit_id: str, outcome: str) -> None:
        self._startups[outcome].inc()

    def allocation(self, unit_id: str, outcome: str, ack_ns: int | None) -> None:
        self._allocs[outcome].inc()
        if ack_ns is not None:
            self._ack.observe_exemplar(ack_ns, self.workload, unit_id, self._at(), "allocation",
                                       self._span(unit_id, "allocation"))

    def drain(self, unit_id: str, reason: str, ns: int) -> None:
        self._drain.labels(self.workload, reason).observe_exemplar(
            ns, self.workload, unit_id, self._at(), "draining", self._span(unit_id, "draining")
        )

    def exited(self, unit_id: str, code: int, restarted: bool) -> None:
        c = str(code)
        code_label = c if c in EXIT_CODES else vocabulary.OTHER
        self._exits.labels(self.workload, code_label, "true" if restarted else "false").inc()

    def failed(self, unit_id: str, reason: str) -> None:
        self._failures.labels(self.workload, self._failure_reason(reason)).inc()

    def destroyed(self, unit_id: str, reason: str) -> None:
        self._destroyed.labels(self.workload, self._destroy_reason(reason)).inc()

    def desired(self, units: int) -> None:
        self._desired.labels(self.workload).set(units)

    def ping(self, seq: int) -> None:
        """Counted on its own: a ping is no log event. The webhook cursor is the intake's to
        track (zaroz_webhook_cursor)."""
        self._pings.labels(self.workload).inc()
