"""Builds valid event envelopes for tests, with times given as offsets from a fixed start."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
T0_NS = int(T0.timestamp()) * 10**9

DATA = {
    "unit.ready": {"private_name": "k.wl"},
    "unit.allocated": {"private_name": "k.wl"},
    "unit.exited": {"code": 0, "restarted": False},
    "unit.failed": {"reason": "crash"},
    "unit.destroyed": {"reason": "done"},
    "units.scaled": {"from": 0, "to": 3, "reason": "policy"},
}


def stamp(offset_us: int) -> str:
    """RFC 3339 UTC time `offset_us` microseconds after T0."""
    return (T0 + timedelta(microseconds=offset_us)).isoformat().replace("+00:00", "Z")


class Log:
    def __init__(self) -> None:
        self.seq = 0
        self.events: list[dict[str, Any]] = []

    def add(
        self,
        type_: str,
        unit: str | None = "u1",
        at_ms: float = 0,
        data: dict[str, Any] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        self.seq += 1
        ev: dict[str, Any] = {
            "seq": self.seq,
            "id": "evt_" + uuid.UUID(int=self.seq).hex,
            "type": type_,
            "contract_version": 1,
            "occurred_at": stamp(round(at_ms * 1000)),
            "service_instance_id": "kernel-1",
            "unit": None if unit is None else {"id": unit, "key": unit, "labels": {}},
            "data": dict(DATA.get(type_, {})) if data is None else data,
        }
        ev.update(extra)
        self.events.append(ev)
        return ev
