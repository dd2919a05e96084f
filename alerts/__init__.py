"""Prometheus recording and alerting rules for the zaroz exporter, generated from the catalog.

`python -m alerts` writes `alerts/rules/*.yaml`; `alerts.recording` holds the recording rule
names dashboards import.
"""
