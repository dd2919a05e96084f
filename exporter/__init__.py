"""Observability exporter for the zaroz units platform."""

__version__ = "0.1.0"
