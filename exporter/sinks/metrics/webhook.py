"""The webhook receiver's and intake's health, as `zaroz_webhook_*` metrics: one place that
knows their names."""

from __future__ import annotations

from exporter.sinks.metrics.family import Registry
from exporter.vocabulary import DELIVERY_RESULTS


class WebhookMetrics:
    def __init__(self, registry: Registry) -> None:
        fam = registry.counter("zaroz_webhook_deliveries_total")
        self._deliveries = {r: fam.labels(r) for r in DELIVERY_RESULTS}
        self._backfills = registry.counter("zaroz_webhook_backfills_total")
        self._cursor = registry.gauge("zaroz_webhook_cursor")
        self._last = registry.gauge("zaroz_webhook_last_delivery_timestamp_seconds")
        self._secrets = registry.gauge("zaroz_webhook_secrets").labels()

    def delivery(self, result: str) -> None:
        self._deliveries[result].inc()

    def delivered(self, workload: str, unix_time: float) -> None:
        self._last.labels(workload).set(unix_time)

    def backfill(self, workload: str, reason: str) -> None:
        self._backfills.labels(workload, reason).inc()

    def cursor(self, workload: str, seq: int) -> None:
        self._cursor.labels(workload).set(seq)

    def secrets(self, n: int) -> None:
        self._secrets.set(n)
