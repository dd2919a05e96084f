"""Deterministic trace and span ids, derived from what the event log says about a unit.

Why derived, not random: a restarted exporter (or `replay` of the same log next week) must put
a unit's spans into the same trace, and must give a span it builds again the same id, so that
backends merge instead of duplicating. Exemplars use the same function, so a histogram sample
links to the unit's trace even when the trace is exported later from the log.
"""

from __future__ import annotations

from hashlib import sha256


def trace_id_of(workload: str, unit_id: str) -> int:
    """First 16 bytes of SHA-256("zaroz-unit:<workload>:<unit id>"); never 0 (invalid in OTLP)."""
    d = sha256(f"zaroz-unit:{workload}:{unit_id}".encode()).digest()
    return int.from_bytes(d[:16], "big") or 1


def trace_hex(workload: str, unit_id: str) -> str:
    """The trace id as W3C / OTLP JSON render it: 32 lower-case hex digits."""
    return f"{trace_id_of(workload, unit_id):032x}"


def span_id_of(workload: str, unit_id: str, kind: str, discriminator: str = "") -> int:
    """8 bytes of SHA-256 over the unit, the span kind and what tells spans of a kind apart
    (the occurred_at of the event that opened it, plus a counter for equal timestamps)."""
    d = sha256(f"zaroz-span:{workload}:{unit_id}:{kind}:{discriminator}".encode()).digest()
    return int.from_bytes(d[:8], "big") or 1
