"""The checkpointer's health, as `zaroz_checkpoint_*` metrics: one place that knows their names."""

from __future__ import annotations

from exporter.sinks.metrics.family import Registry
from exporter.vocabulary import SAVE_RESULTS


class CheckpointMetrics:
    def __init__(self, registry: Registry) -> None:
        saves = registry.counter("zaroz_checkpoint_saves_total")
        self._saves = {r: saves.labels(r) for r in SAVE_RESULTS}
        self._save_at = registry.gauge("zaroz_checkpoint_last_save_timestamp_seconds").labels()
        self._success_at = registry.gauge(
            "zaroz_checkpoint_last_success_timestamp_seconds").labels()
        self._save_s = registry.gauge("zaroz_checkpoint_last_save_duration_seconds").labels()
        self._save_bytes = registry.gauge("zaroz_checkpoint_bytes").labels()

    def saved(self, result: str, unix_time: float = 0.0, seconds: float = 0.0,
              size: int = 0) -> None:
        """One save's result; `unix_time`: when it was durable (written or unchanged)."""
        self._saves[result].inc()
        if result != "error" and unix_time:
            self._success_at.set(unix_time)
        if result == "written":
            self._save_at.set(unix_time)
            self._save_s.set(seconds)
            self._save_bytes.set(size)
