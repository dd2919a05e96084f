"""Scripted and random faults for the simulated events route.

Kept apart from the protocol: the route asks `FaultPlan.take` whether the next request is
faulted, and the wire-level misbehaviour (drop, truncate, trickle) lives here.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import orjson
from aiohttp import web


class FaultKind(StrEnum):
    STATUS = "status"  # an HTTP error status (optionally with Retry-After)
    DROP = "drop"  # close the connection without a response
    TRUNCATE = "truncate"  # headers and part of the body, then close
    EXPIRE = "expire"  # retention jumps to oldest_seq; answer 410
    LOSE = "lose"  # seqs vanish from the log for good; the page skips them
    SLOW = "slow"  # wait before answering, then trickle the body


@dataclass
class Fault:
    """One scripted fault, applied to the next `times` matching requests."""

    kind: FaultKind
    workload: str | None = None  # None: any workload
    times: int = 1
    status: int = 503
    retry_after: int | None = None  # seconds, sent as Retry-After
    oldest_seq: int = 1
    seqs: tuple[int, ...] = ()
    delay_s: float = 0.0
    trickle_s: float = 0.0  # pause between body chunks
    transient: bool = False  # EXPIRE: answer 410 with oldest_seq, retention left where it is


def http_status(
    status: int, retry_after: int | None = None, *, workload: str | None = None, times: int = 1
) -> Fault:
    return Fault(FaultKind.STATUS, workload, times, status=status, retry_after=retry_after)


def drop(*, workload: str | None = None, times: int = 1) -> Fault:
    return Fault(FaultKind.DROP, workload, times)


def truncate(*, workload: str | None = None, times: int = 1) -> Fault:
    return Fault(FaultKind.TRUNCATE, workload, times)


def expire(oldest_seq: int, *, workload: str | None = None, times: int = 1) -> Fault:
    return Fault(FaultKind.EXPIRE, workload, times, oldest_seq=oldest_seq)


def lose(seqs: Iterable[int], *, workload: str | None = None, times: int = 1) -> Fault:
    return Fault(FaultKind.LOSE, workload, times, seqs=tuple(seqs))


def slow(
    delay_s: float, trickle_s: float = 0.0, *, workload: str | None = None, times: int = 1
) -> Fault:
    return Fault(FaultKind.SLOW, workload, times, delay_s=delay_s, trickle_s=trickle_s)


class FaultPlan:
    """Scripted faults first (in order), then, if `rates` is given, seeded random ones."""

    def __init__(
        self,
        faults: Iterable[Fault] = (),
        *,
        rates: Mapping[FaultKind, float] | None = None,
        seed: int = 0,
    ) -> None:
        self.faults = list(faults)
        self.rates = dict(rates or {})
        self.rng = random.Random(seed)
        self.applied: list[tuple[str, FaultKind]] = []  # (workload, kind), for assertions

    def add(self, *faults: Fault) -> None:
        self.faults.extend(faults)

    def take(self, workload: str, after: int, head: int) -> Fault | None:
        """The fault for this request, if any; scripted ones are used up `times` times."""
        fault = self._scripted(workload) or self._random(after, head)
        if fault is not None:
            self.applied.append((workload, fault.kind))
        return fault

    def _scripted(self, workload: str) -> Fault | None:
        for fault in self.faults:
            if fault.times > 0 and fault.workload in (None, workload):
                fault.times -= 1
                if fault.times == 0:
                    self.faults.remove(fault)
                return fault
        return None

    def _random(self, after: int, head: int) -> Fault | None:
        rng = self.rng
        for kind, rate in self.rates.items():
            if rng.random() >= rate:
                continue
            if kind is FaultKind.STATUS:
                status = rng.choice([500, 502, 503, 429])
                retry = rng.randint(1, 2) if status in (429, 503) and rng.random() < 0.7 else None
                return http_status(status, retry)
            if kind is FaultKind.EXPIRE and head > after + 1:
                return expire(min(head, after + 1 + rng.randint(1, 20)))
            if kind is FaultKind.LOSE and head > after:
                return lose([rng.randint(after + 1, head)])
            if kind is FaultKind.SLOW:
                return slow(rng.uniform(0.2, 1.5), rng.uniform(0.0, 0.2))
            if kind in (FaultKind.DROP, FaultKind.TRUNCATE):
                return Fault(kind)
        return None


def json_response(
    status: int, payload: object, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status, body=orjson.dumps(payload), content_type="application/json", headers=headers
    )


def status_response(fault: Fault) -> web.Response:
    headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
    code = "rate_limited" if fault.status == 429 else "unavailable"
    message = f"simulated fault: HTTP {fault.status}"
    return json_response(fault.status, {"error": {"code": code, "message": message}}, headers)


def drop_connection(request: web.Request) -> web.Response:
    """Close the socket; aiohttp's later write to it is a no-op, so the client sees EOF."""
    if request.transport is not None:
        request.transport.close()
    return web.Response(status=500)


async def send_truncated(request: web.Request, body: bytes) -> web.StreamResponse:
    """Promise the full Content-Length, send about half, then close the socket."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = len(body)
    await response.prepare(request)
    await response.write(body[: max(1, len(body) // 2)])
    await asyncio.sleep(0.01)  # let the partial body reach the client before the close
    if request.transport is not None:
        request.transport.close()
    return response


async def send_trickled(request: web.Request, body: bytes, pause_s: float) -> web.StreamResponse:
    """Send the body in a few chunks with pauses in between (a slow link or proxy)."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = len(body)
    await response.prepare(request)
    chunk = max(1, len(body) // 4)
    for start in range(0, len(body), chunk):
        await response.write(body[start : start + chunk])
        await asyncio.sleep(pause_s)
    await response.write_eof()
    return response
