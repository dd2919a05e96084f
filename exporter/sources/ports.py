"""What the sources need from the layers beside them, as small structural protocols.

Sources and sinks are peers and neither imports the other; the wiring above both hands each
source its logs and its metric recorders. Anything with these methods fits (the pipeline's
`Pipeline`, the sinks' `RouteMetrics`, `KubeMetrics`, `WebhookMetrics`; a fake in a test).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from exporter.model.workload import WorkloadLog


class Source(Protocol):
    """One kind of input (the events route, the UnitSignal watch, webhook deliveries): started
    once, stopped once, and asked by /readyz whether it is in step and why not."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def readiness(self) -> tuple[bool, str]: ...


class WorkloadLogs(Protocol):
    """The log of each workload W, which the tailers and the webhook intake feed."""

    @property
    def logs(self) -> Mapping[str, WorkloadLog]:
        """The workloads that have a log so far."""
        ...

    def workload(self, name: str) -> WorkloadLog:
        """W's log, made when W has none yet."""
        ...


class RouteRecorder(Protocol):
    """What the tailers and their supervisor record (`zaroz_route_*`)."""

    def start(self, workload: str) -> None: ...

    def request(self, workload: str, result: str) -> None: ...

    def head(self, workload: str, seq: int) -> None: ...

    def caught_up(self, workload: str, value: bool) -> None: ...

    def success(self, workload: str, unix_time: float) -> None: ...

    def cursor_expired(self, workload: str) -> None: ...

    def workloads(self, n: int) -> None: ...

    def discovery(self, result: str) -> None: ...

    def forget(self, workload: str) -> None: ...


class KubeRecorder(Protocol):
    """What a reflector records (`zaroz_kube_*`), by its `scope` (vocabulary.scope_label)."""

    def start(self, scope: str) -> None: ...

    def request(self, scope: str, verb: str, result: str) -> None: ...

    def failure(self, scope: str, verb: str, reason: str) -> None: ...

    def relist(self, scope: str, reason: str) -> None: ...

    def list_mode(self, scope: str, mode: str) -> None: ...

    def objects(self, scope: str, n: int) -> None: ...

    def synced(self, scope: str, value: bool) -> None: ...

    def event(self, scope: str, type_: str, unix_time: float) -> None: ...


class Durability(Protocol):
    """What the webhook receiver waits for before it acknowledges a delivery: a checkpoint that
    covers everything applied so far (wiring/state/commits.py)."""

    async def covered(self) -> bool:
        """True once such a checkpoint is durable; False when it failed."""
        ...


class WebhookRecorder(Protocol):
    """What the webhook receiver, its secrets and the intake record (`zaroz_webhook_*`); the
    results are vocabulary.DELIVERY_RESULTS."""

    def delivery(self, result: str) -> None: ...

    def delivered(self, workload: str, unix_time: float) -> None: ...

    def backfill(self, workload: str, reason: str) -> None: ...

    def cursor(self, workload: str, seq: int) -> None: ...

    def secrets(self, n: int) -> None: ...
