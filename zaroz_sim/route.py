"""The platform's events route (platform.md 2a), served on loopback for tests and the demo."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from aiohttp import web

from zaroz_sim.config import SimConfig, Workload
from zaroz_sim.faults import (
    FaultKind,
    FaultPlan,
    drop_connection,
    json_response,
    send_trickled,
    send_truncated,
    status_response,
)
from zaroz_sim.scenario import Simulator

_INT = re.compile(r"-?[0-9]+")
_PARAMS = (("after", "invalid_after", 0, None), ("limit", "invalid_limit", 1, 1000),
           ("wait", "invalid_wait", 0, 60))  # fmt: skip


@dataclass
class _Log:
    """One workload's retained events; `floor` is where forced expiry moved retention to."""

    seqs: list[int] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    head: int = 0
    floor: int = 1
    lost: set[int] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def oldest(self, retain_last: int | None) -> int:
        by_count = self.head - retain_last + 1 if retain_last is not None else 1
        return max(1, self.floor, by_count)

    def trim(self, oldest: int) -> None:
        cut = bisect.bisect_left(self.seqs, oldest)
        if cut:
            del self.seqs[:cut], self.events[:cut]

    def lose(self, seqs: Iterable[int]) -> None:
        for seq in seqs:
            self.lost.add(seq)
            i = bisect.bisect_left(self.seqs, seq)
            if i < len(self.seqs) and self.seqs[i] == seq:
                del self.seqs[i], self.events[i]

    def page(self, after: int, limit: int) -> list[dict[str, Any]]:
        i = bisect.bisect_right(self.seqs, after)
        return self.events[i : i + limit]

    def wake(self) -> None:
        old, self.changed = self.changed, asyncio.Event()
        old.set()


def _error(status: int, code: str, message: str, **extra: Any) -> web.Response:
    return json_response(status, {"error": {"code": code, "message": message}, **extra})


class RouteServer:
    """Per-workload logs behind the events route, with optional auth, retention and faults."""

    def __init__(
        self,
        workloads: Iterable[Workload],
        *,
        token: str | None = None,
        retain_last: int | None = None,
        faults: FaultPlan | None = None,
    ) -> None:
        self.workloads = list(workloads)
        self.token = token
        self.retain_last = retain_last
        self.faults = faults or FaultPlan()
        self.logs = {wl.id: _Log() for wl in self.workloads}
        self.requests: Counter[str] = Counter()  # events-route requests per workload id
        self.list_requests = 0
        self.app = web.Application()
        self.app.router.add_get("/v1/workloads", self._list)
        self.app.router.add_get("/v1/workloads/{workload}/events", self._events)
        self._runner: web.AppRunner | None = None

    # -- log maintenance ------------------------------------------------------------------------

    def append(self, workload: str, envelopes: Iterable[dict[str, Any]]) -> None:
        """Add events (ascending seq) to a workload's log and wake its long-polls."""
        log = self.logs[workload]
        for env in envelopes:
            seq = env["seq"]
            if seq <= log.head:
                raise ValueError(f"{workload}: seq {seq} not after head {log.head}")
            log.head = seq
            if seq not in log.lost:
                log.seqs.append(seq)
                log.events.append(env)
        log.trim(log.oldest(self.retain_last))
        log.wake()

    def head_seq(self, workload: str) -> int:
        return self.logs[workload].head

    def oldest_seq(self, workload: str) -> int:
        return self.logs[workload].oldest(self.retain_last)

    # -- HTTP -----------------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        return self.token is None or request.headers.get("Authorization") == f"Bearer {self.token}"

    @staticmethod
    def _unauthorized() -> web.Response:
        response = _error(401, "unauthorized", "missing or wrong bearer token")
        response.headers["WWW-Authenticate"] = "Bearer"
        return response

    async def _list(self, request: web.Request) -> web.Response:
        self.list_requests += 1
        if not self._authorized(request):
            return self._unauthorized()
        listing = [{"id": wl.id, "slug": wl.slug} for wl in self.workloads]
        return json_response(200, {"workloads": listing})

    async def _events(self, request: web.Request) -> web.StreamResponse:
        workload = request.match_info["workload"]
        self.requests[workload] += 1
        if not self._authorized(request):
            return self._unauthorized()
        log = self.logs.get(workload)
        if log is None:
            return _error(404, "unknown_workload", f"no workload {workload!r}")
        values: dict[str, int] = {}
        for name, code, low, high in _PARAMS:
            raw = request.query.get(name)
            if raw is None or not _INT.fullmatch(raw):
                return _error(400, code, f"{name} must be an integer")
            value = int(raw)
            if value < low or (high is not None and value > high):
                bounds = f"{low}..{high}" if high is not None else f">= {low}"
                return _error(400, code, f"{name} must be {bounds}")
            values[name] = value
        after, limit, wait = values["after"], values["limit"], values["wait"]

        fault = self.faults.take(workload, after, log.head)
        kind = fault.kind if fault else None
        if fault is not None and kind is FaultKind.STATUS:
            return status_response(fault)
        if kind is FaultKind.DROP:
            return drop_connection(request)
        if fault is not None and kind is FaultKind.EXPIRE and fault.transient:
            message = f"events before seq {fault.oldest_seq} are no longer retained"
            return _error(410, "cursor_expired", message, oldest_seq=fault.oldest_seq)
        if fault is not None and kind is FaultKind.EXPIRE:
            log.floor = max(log.floor, fault.oldest_seq)
            log.trim(log.oldest(self.retain_last))
            return self._expired(log)
        if fault is not None and kind is FaultKind.LOSE:
            log.lose(fault.seqs)
        if fault is not None and kind is FaultKind.SLOW:
            await asyncio.sleep(fault.delay_s)

        payload = await self._poll(log, after, limit, wait)
        if isinstance(payload, web.Response):
            return payload
        try:
            body = orjson.dumps(payload)
        except TypeError:  # an integer beyond 64 bits (the contract sets no maximum)
            body = json.dumps(payload, separators=(",", ":")).encode()
        if kind is FaultKind.TRUNCATE:
            return await send_truncated(request, body)
        if fault is not None and kind is FaultKind.SLOW and fault.trickle_s > 0:
            return await send_trickled(request, body, fault.trickle_s)
        return web.Response(body=body, content_type="application/json")

    async def _poll(
        self, log: _Log, after: int, limit: int, wait: int
    ) -> dict[str, Any] | web.Response:
        """The page after `after`, waiting up to `wait` s for one; 410 if the cursor expired."""
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            if after + 1 < log.oldest(self.retain_last):
                return self._expired(log)
            events = log.page(after, limit)
            remaining = deadline - asyncio.get_running_loop().time()
            if events or remaining <= 0:
                return {"events": events, "head_seq": log.head}
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(log.changed.wait(), remaining)

    def _expired(self, log: _Log) -> web.Response:
        oldest = log.oldest(self.retain_last)
        message = f"events before seq {oldest} are no longer retained"
        return _error(410, "cursor_expired", message, oldest_seq=oldest)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on host:port (0: any free port); returns the base URL."""
        self._runner = web.AppRunner(self.app, shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound_port = self._runner.addresses[0][1]
        return f"http://{host}:{bound_port}"

    async def stop(self) -> None:
        for log in self.logs.values():
            log.wake()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class LiveFeed:
    """Feeds a RouteServer from a Simulator in wall-clock time: the one place that reads it."""

    def __init__(
        self,
        server: RouteServer,
        config: SimConfig,
        *,
        time_scale: float = 1.0,
        interval_s: float = 0.1,
        clock: Callable[[], int] = time.time_ns,
        listeners: Iterable[Callable[[str, list[dict[str, Any]]], None]] = (),
        history_s: float = 0.0,
    ) -> None:
        """`history_s`: the simulation starts that long before now, so the first tick writes
        that much history at once (a demo with data from its first second)."""
        self.server = server
        self.listeners = list(listeners)  # also told of every batch (the cluster mirror)
        self.time_scale = time_scale
        self.interval_s = interval_s
        self.clock = clock
        self._wall0 = clock()
        self.simulator = Simulator(
            replace(config, start_ns=self._wall0 - int(history_s * 1_000_000_000)))
        self._task: asyncio.Task[None] | None = None

    def sim_now(self) -> int:
        """Simulated time for the current wall-clock time (time_scale x faster)."""
        return self._wall0 + int((self.clock() - self._wall0) * self.time_scale)

    def tick(self) -> int:
        """Append every event due by now; returns how many were appended."""
        count = 0
        for workload, events in self.simulator.events_until(self.sim_now()).items():
            if events:
                self.server.append(workload, events)
                for listener in self.listeners:
                    listener(workload, events)
                count += len(events)
        return count

    async def _run(self) -> None:
        while True:
            self.tick()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
