"""The Kubernetes list/watch reflectors' health, as the catalog's `zaroz_kube_*` metrics.

`scope` is the watched namespace, or `*` for a cluster-wide reflector (not a valid namespace
name, so never ambiguous; and not `namespace`, which Prometheus's own target labels would shadow).
"""

from __future__ import annotations

from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.series import CounterSeries, GaugeSeries
from exporter.vocabulary import (
    KUBE_LIST_MODES,
    KUBE_RELIST_REASONS,
    KUBE_WATCH_EVENT_TYPES,
    scope_label,
)

__all__ = ["KubeMetrics", "scope_label"]


class KubeMetrics:
    """Small calls a reflector makes; one place that knows the metric names."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._requests = registry.counter("zaroz_kube_requests_total")
        self._failures = registry.counter("zaroz_kube_failures_total")
        self._relists = registry.counter("zaroz_kube_relists_total")
        self._objects = registry.gauge("zaroz_kube_objects")
        self._synced = registry.gauge("zaroz_kube_synced")
        self._list_mode = registry.gauge("zaroz_kube_list_mode")
        self._events = registry.counter("zaroz_kube_watch_events_total")
        self._last_event = registry.gauge("zaroz_kube_last_watch_event_timestamp_seconds")
        # (scope, event type) -> its two series: one lookup per watch event, not two label sets
        self._on_event: dict[tuple[str, str], tuple[CounterSeries, GaugeSeries]] = {}

    def start(self, scope: str) -> None:
        """A reflector starts: its series exist (at 0) before its first answer."""
        self._synced.labels(scope)
        self._objects.labels(scope)
        for reason in KUBE_RELIST_REASONS:
            self._relists.labels(scope, reason)
        for mode in KUBE_LIST_MODES:
            self._list_mode.labels(scope, mode)

    def decoded(self, scope: str) -> tuple[CounterSeries, CounterSeries]:
        """The (metadata-only, whole object) counts of one scope's handler."""
        fam = self.registry.counter("zaroz_kube_objects_decoded_total")
        return fam.labels(scope, "metadata"), fam.labels(scope, "object")

    def request(self, scope: str, verb: str, result: str) -> None:
        self._requests.labels(scope, verb, result).inc()

    def failure(self, scope: str, verb: str, reason: str) -> None:
        self._failures.labels(scope, verb, reason).inc()

    def relist(self, scope: str, reason: str) -> None:
        self._relists.labels(scope, reason).inc()

    def list_mode(self, scope: str, mode: str) -> None:
        """The last sync was made this way: its series 1, the other 0."""
        for m in KUBE_LIST_MODES:
            self._list_mode.labels(scope, m).set(1 if m == mode else 0)

    def objects(self, scope: str, n: int) -> None:
        self._objects.labels(scope).set(n)

    def synced(self, scope: str, value: bool) -> None:
        self._synced.labels(scope).set(1 if value else 0)

    def event(self, scope: str, type_: str, unix_time: float) -> None:
        series = self._on_event.get((scope, type_))
        if series is None:
            t = type_ if type_ in KUBE_WATCH_EVENT_TYPES else "unknown"
            series = (self._events.labels(scope, t), self._last_event.labels(scope))
            if t != "unknown":  # only bounded keys are kept
                self._on_event[(scope, type_)] = series
        series[0].inc()
        series[1].set(unix_time)

    def forget(self, scope: str) -> None:
        """A reflector stopped for good: drop its series so they do not go stale."""
        for key in [k for k in self._on_event if k[0] == scope]:
            del self._on_event[key]
        for gauge in (self._objects, self._synced, self._last_event):
            gauge.remove(scope)
        for mode in KUBE_LIST_MODES:
            self._list_mode.remove(scope, mode)
        for counter in (self._requests, self._failures, self._relists, self._events):
            for values in [v for v in counter.series if v[0] == scope]:
                counter.remove(*values)
