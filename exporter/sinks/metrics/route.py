"""The events route tailer's health, as the catalog's `zaroz_route_*` metrics."""

from __future__ import annotations

from exporter.sinks.metrics.family import Registry


class RouteMetrics:
    """Small calls the tailer and its supervisor make; one place that knows the metric names."""

    def __init__(self, registry: Registry) -> None:
        self._requests = registry.counter("zaroz_route_requests_total")
        self._head = registry.gauge("zaroz_route_head_seq")
        self._caught_up = registry.gauge("zaroz_route_caught_up")
        self._success = registry.gauge("zaroz_route_last_success_timestamp_seconds")
        self._expired = registry.counter("zaroz_route_cursor_expired_total")
        self._workloads = registry.gauge("zaroz_route_workloads").labels()
        self._discovery = registry.counter("zaroz_route_discovery_total")

    def start(self, workload: str) -> None:
        """A tailer starts: its series exist (at 0) before its first answer."""
        self._caught_up.labels(workload)
        self._expired.labels(workload)

    def request(self, workload: str, result: str) -> None:
        self._requests.labels(workload, result).inc()

    def head(self, workload: str, seq: int) -> None:
        self._head.labels(workload).set(seq)

    def caught_up(self, workload: str, value: bool) -> None:
        self._caught_up.labels(workload).set(1 if value else 0)

    def success(self, workload: str, unix_time: float) -> None:
        self._success.labels(workload).set(unix_time)

    def cursor_expired(self, workload: str) -> None:
        self._expired.labels(workload).inc()

    def workloads(self, n: int) -> None:
        self._workloads.set(n)

    def discovery(self, result: str) -> None:
        self._discovery.labels(result).inc()

    def forget(self, workload: str) -> None:
        """A workload left the route: drop its route series so they do not go stale."""
        for fam in (self._head, self._caught_up, self._success, self._expired):
            fam.remove(workload)
        for values in [v for v in self._requests.series if v[0] == workload]:
            self._requests.remove(*values)
