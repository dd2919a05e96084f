"""Scripted faults for the Kubernetes emulator, per request kind (list, watch, get).

The emulator asks `KubeFaults.take` for each request; the first pending fault that applies is
used once (of its `times`). Helpers add a fault and return it, e.g.
`faults.status(429, retry_after=1, on="list")` or `faults.cut_watch(after_events=3)`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

REQUEST_KINDS = ("list", "watch", "get")


class KubeFaultKind(StrEnum):
    STATUS = "status"  # an HTTP error Status (429 carries Retry-After)
    DROP = "drop"  # close the connection without any response
    CUT = "cut"  # watch: close the stream after N events (no terminating chunk)
    TRUNCATE = "truncate"  # watch: N events, then half a line, then close; list: half the body
    EXPIRE_WATCH = "expire_watch"  # watch: a 200 stream with one ERROR 410 event, then close
    EXPIRE_CONTINUE = "expire_continue"  # list with a continue token: 410 Expired
    SLOW = "slow"  # delay before the first byte, and between lines / body chunks
    COMPACT = "compact"  # drop the history before serving: resuming watches get 410


@dataclass
class KubeFault:
    kind: KubeFaultKind
    on: frozenset[str]
    times: int = 1
    status: int = 500
    retry_after: int | None = None
    after_events: int = 0
    delay_s: float = 0.0
    between_s: float = 0.0


def _kinds(on: str | Iterable[str]) -> frozenset[str]:
    kinds = frozenset([on] if isinstance(on, str) else on)
    if not kinds <= set(REQUEST_KINDS):
        raise ValueError(f"unknown request kind in {sorted(kinds)}; use {REQUEST_KINDS}")
    return kinds


class KubeFaults:
    """Pending faults in the order added; `applied` records (request kind, fault kind)."""

    def __init__(self) -> None:
        self.pending: list[KubeFault] = []
        self.applied: list[tuple[str, KubeFaultKind]] = []

    def add(self, fault: KubeFault) -> KubeFault:
        if fault.times < 1:
            raise ValueError("times must be >= 1")
        self.pending.append(fault)
        return fault

    def take(self, request_kind: str, *, has_continue: bool = False) -> KubeFault | None:
        """The fault for this request, if any, counting one of its uses."""
        for fault in self.pending:
            if request_kind not in fault.on:
                continue
            if fault.kind is KubeFaultKind.EXPIRE_CONTINUE and not has_continue:
                continue
            fault.times -= 1
            if fault.times == 0:
                self.pending.remove(fault)
            self.applied.append((request_kind, fault.kind))
            return fault
        return None

    def clear(self) -> None:
        self.pending.clear()

    # -- helpers -------------------------------------------------------------------------------

    def status(
        self,
        code: int,
        *,
        retry_after: int | None = None,
        on: str | Iterable[str] = REQUEST_KINDS,
        times: int = 1,
    ) -> KubeFault:
        """An HTTP error Status: 429 (TooManyRequests), 500, 503, 504, ..."""
        return self.add(KubeFault(KubeFaultKind.STATUS, _kinds(on), times, status=code,
                                  retry_after=retry_after))  # fmt: skip

    def drop(self, *, on: str | Iterable[str] = REQUEST_KINDS, times: int = 1) -> KubeFault:
        """No response at all. aiohttp retries an idempotent GET once: use times >= 2."""
        return self.add(KubeFault(KubeFaultKind.DROP, _kinds(on), times))

    def cut_watch(self, after_events: int = 0, *, times: int = 1) -> KubeFault:
        """Close a watch stream mid-way, after `after_events` events (bookmarks not counted)."""
        return self.add(KubeFault(KubeFaultKind.CUT, _kinds("watch"), times,
                                  after_events=after_events))  # fmt: skip

    def truncate(
        self, *, on: str | Iterable[str] = "watch", after_events: int = 0, times: int = 1
    ) -> KubeFault:
        """Watch: half of the line after `after_events` events; list/get: half the body."""
        return self.add(KubeFault(KubeFaultKind.TRUNCATE, _kinds(on), times,
                                  after_events=after_events))  # fmt: skip

    def expire_watch(self, *, times: int = 1) -> KubeFault:
        """The next watch answers 200 with one ERROR 410 Expired event, whatever its rv."""
        return self.add(KubeFault(KubeFaultKind.EXPIRE_WATCH, _kinds("watch"), times))

    def expire_continue(self, *, times: int = 1) -> KubeFault:
        """The next LIST that carries a continue token answers 410 Expired."""
        return self.add(KubeFault(KubeFaultKind.EXPIRE_CONTINUE, _kinds("list"), times))

    def slow(
        self,
        delay_s: float,
        between_s: float = 0.0,
        *,
        on: str | Iterable[str] = REQUEST_KINDS,
        times: int = 1,
    ) -> KubeFault:
        """Wait `delay_s` before the first byte, then `between_s` between lines/chunks."""
        return self.add(KubeFault(KubeFaultKind.SLOW, _kinds(on), times, delay_s=delay_s,
                                  between_s=between_s))  # fmt: skip

    def compact(self, *, on: str | Iterable[str] = "watch", times: int = 1) -> KubeFault:
        """Compact the history just before serving the request (etcd compaction)."""
        return self.add(KubeFault(KubeFaultKind.COMPACT, _kinds(on), times))
