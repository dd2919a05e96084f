"""OTLP traces of unit lifecycles: one trace per unit, built from the model's `tap` stream.

- `ids`: deterministic trace / span ids (also used by the metrics' exemplars);
- `builder`: the pure per-unit span state machine (`TraceBuilder`, a `WorkloadLog.tap`);
- `otlp`: the OpenTelemetry SDK pipeline (`TraceSink`), configured by the OTEL_* environment.

This package's top level imports no OpenTelemetry module: the metrics need `ids` for exemplars,
and an exporter without traces should not pay the SDK's import time.
"""
