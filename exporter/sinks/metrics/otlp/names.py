"""Prometheus names to OpenTelemetry names and units, as the Prometheus-compatibility spec
maps them the other way: a receiver that adds the unit and type suffixes back (an
OpenTelemetry Collector's Prometheus exporters, VictoriaMetrics with
`-opentelemetry.usePrometheusNaming`, Prometheus' OTLP receiver) turns each name back into the
documented one. A counter loses `_total`; a unit suffix becomes the UCUM unit; a name whose
suffix is no known unit keeps it, with no unit, so nothing is added back."""

from __future__ import annotations

import functools

# Prometheus unit suffix -> UCUM unit (the spec's table, for the units our families use).
UNITS = {"seconds": "s", "bytes": "By", "milliseconds": "ms", "ratio": "1"}


@functools.lru_cache(maxsize=4096)
def otel_name(name: str, monotonic: bool) -> tuple[str, str]:
    """(OpenTelemetry name, unit) of a Prometheus family name (a counter's with `_total`)."""
    base = name.removesuffix("_total") if monotonic else name
    head, _, last = base.rpartition("_")
    unit = UNITS.get(last, "") if head else ""
    if unit == "1" and monotonic:  # a ratio is a gauge's unit, never added to a counter
        unit = ""
    return (head if unit else base), unit
