"""What the lifecycle model reports, as a port the sinks implement.

The model calls these methods instead of building observation objects: one call per fact keeps
the hot path cheap, and a recording implementation makes the model's output easy to compare.
Durations are integer nanoseconds of the event clock.
"""

from __future__ import annotations

from typing import Any, Protocol


class Observer(Protocol):
    """One call per fact. An implementation may also define `applied_many(counts)` (events by
    type label): `WorkloadLog.offer_many` then reports a batch's applied events in one call at
    its end instead of an `applied` call each (it looks the method up on the class)."""

    def applied(self, type_label: str, seq: int) -> None: ...
    def duplicate(self, source: str) -> None: ...
    def refetched(self, source: str) -> None: ...
    def invalid(self, reason: str) -> None: ...
    def gap(self, first: int, last: int) -> None: ...
    def skew(self, measurement: str) -> None: ...
    def ready(self, unit_id: str, ns: int) -> None: ...
    def startup(self, unit_id: str, outcome: str) -> None: ...
    def allocation(self, unit_id: str, outcome: str, ack_ns: int | None) -> None: ...
    def drain(self, unit_id: str, reason: str, ns: int) -> None: ...
    def exited(self, unit_id: str, code: int, restarted: bool) -> None: ...
    def failed(self, unit_id: str, reason: str) -> None: ...
    def destroyed(self, unit_id: str, reason: str) -> None: ...
    def desired(self, units: int) -> None: ...
    def ping(self, seq: int) -> None: ...


class Recorder:
    """An Observer that records every call as a tuple, for tests and replay comparisons."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def record(*args: Any) -> None:
            self.calls.append((name, *args))

        return record

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [c[1:] for c in self.calls if c[0] == name]
