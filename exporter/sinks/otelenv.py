"""What the standard OTEL_* environment turns on, read without importing the exporters it turns
on: a start with neither traces nor OTLP metrics should not pay for their modules (the
OpenTelemetry SDK and the OTLP encoders are ~80 ms of imports before ready)."""

from __future__ import annotations

import os
from collections.abc import Mapping


def traces_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether the OTEL_* environment asks for traces: an OTLP endpoint is set (or
    OTEL_TRACES_EXPORTER=otlp), and neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none."""
    e = os.environ if env is None else env
    if e.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = e.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return exporter == "otlp" or bool(
        e.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or e.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def interval_from_env(environ: Mapping[str, str]) -> float:
    """OTEL_METRIC_EXPORT_INTERVAL (milliseconds; the spec's default 60000) in seconds."""
    raw = environ.get("OTEL_METRIC_EXPORT_INTERVAL", "").strip()
    if not raw:
        return 60.0
    try:
        ms = float(raw)
    except ValueError:
        raise ValueError(f"OTEL_METRIC_EXPORT_INTERVAL={raw!r} is not a number of ms") from None
    if not ms > 0:
        raise ValueError(f"OTEL_METRIC_EXPORT_INTERVAL={raw!r} must be positive")
    return ms / 1000
