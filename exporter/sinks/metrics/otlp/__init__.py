"""The metrics pushed over OTLP: the protobuf scrape's families, read back and mapped onto the
OpenTelemetry data model (docs/otlp-metrics.md), with start times kept in the checkpoint."""
