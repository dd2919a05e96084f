"""The tailer and its supervisor against the simulated events route (zaroz_sim.route).

Everything goes over real HTTP on loopback: RouteServer -> RouteClient -> Tailer -> WorkloadLog ->
metrics in one Registry, and assertions read series values from that Registry.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.route import RouteMetrics
from exporter.sources.backoff import Backoff
from exporter.sources.route import Page, RouteClient
from exporter.sources.tailer import Tailer, TailSupervisor
from exporter.sources.token import TokenFile
from exporter.wiring.events import Pipeline
from tests.envelopes import Log
from tests.waiting import until
from zaroz_sim.config import SimConfig, Workload
from zaroz_sim.faults import FaultPlan, drop, expire, http_status, lose, slow, truncate
from zaroz_sim.route import RouteServer
from zaroz_sim.scenario import Simulator

S = 1_000_000_000


def fast_backoff() -> Backoff:
    return Backoff(base=0.01, cap=0.05, rng=random.Random(0))


FAST = {"wait": 1, "attention_delay": 0.05, "idle_delay": 0.01}


def envelopes(n: int) -> list[dict[str, Any]]:
    log = Log()
    for i in range(n):
        log.add("unit.created", unit=f"u{i}", at_ms=i)
    return log.events


@cache
def sim_log() -> tuple[dict[str, Any], ...]:
    """A realistic log (about 2000 events) from the simulator, generated once."""
    cfg = SimConfig(seed=11, workloads=1, arrival_rate=0.5)
    sim = Simulator(cfg)
    end = cfg.start_ns + 200 * S
    events = sim.events_until(end)["wl-1"] + sim.finish(end)["wl-1"]
    return tuple(events)


def add_workload(server: RouteServer, wl: Workload) -> None:
    """The simulated route has a fixed workload list; tests grow it like the platform would."""
    server.workloads.append(wl)
    server.logs[wl.id] = type(next(iter(server.logs.values())))()


@dataclass
class Rig:
    server: RouteServer
    url: str
    session: aiohttp.ClientSession
    client: RouteClient
    registry: Registry
    pipeline: Pipeline
    metrics: RouteMetrics

    def tailer(
        self, workload: str = "wl-1", client: RouteClient | None = None, **kw: Any
    ) -> Tailer:
        opts = {**FAST, "backoff": fast_backoff(), **kw}
        return Tailer(client or self.client, workload, self.pipeline.workload(workload),
                      self.metrics, **opts)

    def supervisor(self, workloads: list[str] | None, **kw: Any) -> TailSupervisor:
        return TailSupervisor(self.client, self.pipeline, self.metrics, workloads,
                              kw.pop("discovery_interval", 0.05), backoff_factory=fast_backoff,
                              **{**FAST, **kw})

    def value(self, name: str, *labels: str) -> float:
        s = self.registry[name].series.get(labels)
        return 0 if s is None else s.value  # type: ignore[union-attr]

    def total(self, name: str, workload: str = "wl-1") -> float:
        return sum(s.value for k, s in self.registry[name].series.items()  # type: ignore[union-attr]
                   if k[0] == workload)

    def requests(self, workload: str = "wl-1") -> dict[str, float]:
        return {k[1]: s.value for k, s in self.registry["zaroz_route_requests_total"].series.items()
                if k[0] == workload}  # type: ignore[union-attr]


@pytest.fixture
async def make_rig(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    made: list[tuple[RouteServer, aiohttp.ClientSession]] = []

    async def make(*faults: Any, token: str | None = None, workloads: int = 1) -> Rig:
        wls = SimConfig(workloads=workloads).workload_list()
        server = RouteServer(wls, token=token, faults=FaultPlan(faults))
        url = await server.start()
        session = aiohttp.ClientSession()
        made.append((server, session))
        token_file = None
        if token is not None:
            (tmp_path / "token").write_text(token + "\n")
            token_file = TokenFile(tmp_path / "token")
        registry = Registry()
        return Rig(server, url, session, RouteClient(session, url, token_file, timeout_margin=2),
                   registry, Pipeline(registry), RouteMetrics(registry))

    yield make
    for server, session in made:
        await session.close()
        await server.stop()


def model_lines(registry: Registry) -> list[bytes]:
    return [ln for ln in render_bytes(registry).splitlines() if not ln.startswith(b"zaroz_route_")]


# The tailer ---------------------------------------------------------------------------------


async def test_clean_tail_to_head_applies_everything_once(make_rig):
    rig = await make_rig()
    events = list(sim_log())
    half = len(events) // 2
    rig.server.append("wl-1", events[:half])
    t = rig.tailer(limit=100)
    t0 = time.time()
    t.start()
    await until(lambda: t.caught_up)
    rig.server.append("wl-1", events[half:])  # the rest arrives through long polls
    await until(lambda: t.log.applied_through == len(events))
    await t.stop()

    oracle = Registry()
    direct = Pipeline(oracle).workload("wl-1")
    for ev in events:
        direct.offer(copy.deepcopy(ev))
    assert model_lines(rig.registry) == model_lines(oracle)
    assert rig.total("zaroz_events_total") == len(events)
    assert rig.total("zaroz_events_duplicate_total") == 0
    assert rig.value("zaroz_events_gaps_total", "wl-1") == 0
    assert set(rig.requests()) == {"200"}
    # Every request the route answered is counted once (at most the long poll in flight at
    # stop() was cut before its answer): the route's own count is the independent one.
    served = rig.server.requests["wl-1"]
    assert served - 1 <= rig.requests()["200"] <= served
    assert rig.requests()["200"] >= len(events) // 100
    assert rig.value("zaroz_route_head_seq", "wl-1") == len(events) == t.head_seq
    assert rig.value("zaroz_route_caught_up", "wl-1") == 1
    assert t0 <= rig.value("zaroz_route_last_success_timestamp_seconds", "wl-1") <= time.time()


async def test_5xx_then_recovery(make_rig):
    rig = await make_rig(http_status(500, times=2), http_status(503), http_status(502))
    rig.server.append("wl-1", envelopes(30))
    t = rig.tailer(limit=10)
    t.start()
    await until(lambda: t.log.applied_through == 30)
    await t.stop()
    r = rig.requests()
    assert (r["500"], r["503"], r["502"]) == (2, 1, 1)
    assert r["200"] >= 3
    assert rig.total("zaroz_events_total") == 30
    assert rig.total("zaroz_events_duplicate_total") == 0
    assert t.backoff.failures == 0  # reset by the successes


async def test_429_retry_after_is_honoured(make_rig):
    rig = await make_rig(http_status(429, retry_after=1))
    rig.server.append("wl-1", envelopes(5))
    t = rig.tailer()
    start = time.monotonic()
    t.start()
    await until(lambda: t.log.applied_through == 5)
    assert time.monotonic() - start >= 1.0  # a real second: nothing came back earlier
    await t.stop()
    assert rig.requests() == {"429": 1, "200": 1}


async def test_429_retry_after_sets_the_pause_given_to_sleep(make_rig):
    slept: list[float] = []

    async def sleep(d: float) -> None:
        slept.append(d)
        await asyncio.sleep(0)

    rig = await make_rig(http_status(429, retry_after=30), http_status(503, retry_after=20))
    rig.server.append("wl-1", envelopes(3))
    t = rig.tailer(sleep=sleep)
    t.start()
    await until(lambda: t.log.applied_through == 3)
    await t.stop()
    assert 30 <= slept[0] <= 33 and 20 <= slept[1] <= 22


async def test_dropped_connections_and_truncated_bodies_lose_and_duplicate_nothing(make_rig):
    # aiohttp resends an idempotent GET once after a disconnect, so drops come in pairs.
    rig = await make_rig(drop(times=2), truncate(), drop(times=2), truncate(times=2))
    rig.server.append("wl-1", envelopes(50))
    t = rig.tailer(limit=10)
    t.start()
    await until(lambda: t.log.applied_through == 50)
    await t.stop()
    r = rig.requests()
    assert (r["connection"], r["truncated"]) == (2, 3)
    assert rig.total("zaroz_events_total") == 50
    assert rig.total("zaroz_events_duplicate_total") == 0
    assert rig.value("zaroz_events_gaps_total", "wl-1") == 0


async def test_410_counts_the_expired_range_missing_and_continues_from_oldest(make_rig):
    rig = await make_rig()
    rig.server.append("wl-1", envelopes(10))
    t = rig.tailer(limit=3)
    assert await t.poll() == 0 and t.log.applied_through == 3
    rig.server.faults.add(expire(8))
    assert await t.poll() == 0  # no pause: the cursor moved
    assert t.log.applied_through == 7
    assert rig.value("zaroz_events_missing_total", "wl-1") == 8 - 3 - 1
    assert rig.value("zaroz_events_gaps_total", "wl-1") == 1
    assert rig.value("zaroz_route_cursor_expired_total", "wl-1") == 1
    await t.poll()
    assert t.log.applied_through == 10 and t.caught_up
    assert rig.total("zaroz_events_total") == 3 + 3
    assert rig.requests() == {"200": 2, "410": 1}


async def test_410_beyond_the_models_seqs_moves_the_cursor_there(make_rig):
    """An oldest retained seq past 2^63 - 1: the cursor goes on after what expired (no 410
    asked for again and again)."""
    rig = await make_rig()
    rig.server.append("wl-1", envelopes(3))
    t = rig.tailer()
    await t.poll()
    rig.server.faults.add(expire(2**63 + 5))
    assert await t.poll() == 0
    assert t.cursor == 2**63 + 4 and t.log.applied_through == 2**63 - 2
    await t.poll()
    assert t.caught_up and rig.requests() == {"200": 2, "410": 1}


async def test_410_that_would_not_move_the_cursor_backs_off(make_rig):
    rig = await make_rig(expire(1))
    rig.server.append("wl-1", envelopes(2))
    t = rig.tailer()
    assert await t.poll() > 0  # oldest_seq 1 while the cursor is 0: nothing to give up
    assert t.log.applied_through == 0 and rig.value("zaroz_events_missing_total", "wl-1") == 0


async def test_page_with_lost_seqs_is_counted_as_gaps_and_the_rest_applied(make_rig, caplog):
    rig = await make_rig(lose([1, 4, 5, 8]))
    rig.server.append("wl-1", envelopes(10))
    t = rig.tailer()
    with caplog.at_level(logging.WARNING, logger="exporter.sources.tailer"):
        await t.poll()
    assert t.log.applied_through == 10 and t.caught_up
    assert rig.value("zaroz_events_gaps_total", "wl-1") == 3  # {1}, {4, 5}, {8}
    assert rig.value("zaroz_events_missing_total", "wl-1") == 4
    assert rig.total("zaroz_events_total") == 6
    assert rig.value("zaroz_events_pending", "wl-1") == 0
    assert [r.getMessage() for r in caplog.records] == ["events route page skipped seqs"]


async def test_slow_response_beyond_the_timeout_is_retried(make_rig):
    rig = await make_rig(slow(1.5))
    rig.server.append("wl-1", envelopes(4))
    impatient = RouteClient(rig.session, rig.url, None, timeout_margin=0.3)
    t = rig.tailer(client=impatient)
    t.start()
    await until(lambda: t.log.applied_through == 4)
    await t.stop()
    assert rig.requests() == {"timeout": 1, "200": 1}
    assert rig.total("zaroz_events_total") == 4


async def test_long_poll_receives_appended_events_without_spinning(make_rig):
    rig = await make_rig()
    t = rig.tailer(wait=5)
    t.start()
    await until(lambda: t.caught_up)  # an empty log is caught up at once (first ask: wait=0)
    await asyncio.sleep(0.3)
    before = rig.server.requests["wl-1"]
    assert before <= 2  # one quick ask, then one long poll held open
    start = time.monotonic()
    rig.server.append("wl-1", envelopes(3))
    await until(lambda: t.log.applied_through == 3)
    assert time.monotonic() - start < 1.0  # woken by the append, not by the 5 s wait
    await asyncio.sleep(0.1)
    assert rig.server.requests["wl-1"] <= before + 1
    await t.stop()


async def test_token_rotation_sends_the_new_token(make_rig, tmp_path):
    rig = await make_rig(token="t1")
    rig.server.append("wl-1", envelopes(2))
    t = rig.tailer()
    t.start()
    await until(lambda: t.log.applied_through == 2)
    rig.server.token = "t2"  # the platform rotates first; the file lags behind
    rig.server.append("wl-1", envelopes(4)[2:])  # answered by the poll already authorised
    await until(lambda: rig.requests().get("401", 0) >= 1)
    tmp = tmp_path / "token.new"
    tmp.write_text("t2\n")
    os.replace(tmp, tmp_path / "token")  # atomic swap: new inode
    rig.server.append("wl-1", envelopes(6)[4:])
    await until(lambda: t.log.applied_through == 6)
    await t.stop()
    assert rig.requests()["401"] >= 1
    assert rig.total("zaroz_events_total") == 6
    assert rig.client.token is not None and rig.client.token.get() == "t2"


async def test_unexpected_exception_is_logged_and_retried(caplog):
    class Flaky:
        calls = 0

        async def events(self, workload: str, after: int, limit: int, wait: float) -> Page:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("boom")
            return Page([], 0)

    registry = Registry()
    t = Tailer(Flaky(), "wl-1", Pipeline(registry).workload("wl-1"),  # type: ignore[arg-type]
               RouteMetrics(registry), backoff=fast_backoff(), idle_delay=0.01)
    with caplog.at_level(logging.ERROR, logger="exporter.sources.tailer"):
        t.start()
        await until(lambda: t.caught_up)
        await t.stop()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert errors[0].workload == "wl-1"  # type: ignore[attr-defined]


async def test_repeated_failures_log_once_then_recovery(make_rig, caplog):
    rig = await make_rig(http_status(503, times=6))
    rig.server.append("wl-1", envelopes(2))
    t = rig.tailer()
    with caplog.at_level(logging.INFO, logger="exporter.sources.tailer"):
        t.start()
        await until(lambda: t.caught_up)
        await t.stop()
    assert rig.requests()["503"] == 6
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].result == "503"  # type: ignore[attr-defined]
    recovered = [r for r in caplog.records if r.getMessage() == "events route recovered"]
    assert len(recovered) == 1 and recovered[0].failures == 6  # type: ignore[attr-defined]


# The supervisor -----------------------------------------------------------------------------


async def test_given_workloads_are_tailed_and_ready_when_all_caught_up(make_rig):
    rig = await make_rig(workloads=2)
    rig.server.append("wl-1", envelopes(3))
    rig.server.append("wl-2", envelopes(5))
    sup = rig.supervisor(["wl-1", "wl-2"])
    assert not sup.ready()
    await sup.start()
    await until(sup.ready)
    assert sup.readiness() == (True, "2 workloads caught up")
    assert rig.pipeline.logs["wl-2"].applied_through == 5
    assert rig.value("zaroz_route_workloads") == 2
    assert rig.server.list_requests == 0
    await sup.stop()
    assert all(t._task is None for t in sup.tailers.values())


async def test_unknown_workload_404_is_retried_without_crashing(make_rig):
    rig = await make_rig()
    rig.server.append("wl-1", envelopes(3))
    sup = rig.supervisor(["ghost", "wl-1"])
    await sup.start()
    ghost = sup.tailers["ghost"]
    await until(lambda: rig.requests("ghost").get("404", 0) >= 2 and sup.tailers["wl-1"].caught_up)
    assert not ghost.start().done()  # still running
    ok, detail = sup.readiness()
    assert not ok and "ghost" in detail
    # The workload appears later: the same tailer picks it up.
    add_workload(rig.server, Workload("ghost", "ghost"))
    rig.server.append("ghost", envelopes(2))
    await until(sup.ready)
    assert rig.pipeline.logs["ghost"].applied_through == 2
    assert rig.requests("ghost")["404"] >= 2
    await sup.stop()


async def test_discovery_starts_and_stops_tailers(make_rig):
    rig = await make_rig(token="tok")
    rig.server.append("wl-1", envelopes(3))
    sup = rig.supervisor(None)
    await sup.start()
    await until(sup.ready)
    assert set(sup.tailers) == {"wl-1"}

    add_workload(rig.server, Workload("wl-9", "new"))
    rig.server.append("wl-9", envelopes(4))
    await until(lambda: "wl-9" in sup.tailers)
    await until(sup.ready)
    assert rig.pipeline.logs["wl-9"].applied_through == 4
    assert rig.value("zaroz_route_workloads") == 2

    rig.server.workloads = [w for w in rig.server.workloads if w.id != "wl-1"]
    await until(lambda: ("wl-1",) not in rig.registry["zaroz_route_caught_up"].series)
    assert set(sup.tailers) == {"wl-9"}
    assert rig.value("zaroz_route_workloads") == 1
    assert rig.requests("wl-1") == {}
    assert rig.pipeline.logs["wl-1"].applied_through == 3  # the cursor is kept
    assert rig.value("zaroz_route_discovery_total", "ok") >= 3
    await sup.stop()


async def test_failed_discovery_is_counted_and_not_ready(make_rig):
    rig = await make_rig(token="tok")
    rig.client.token = None  # the route refuses the list
    sup = rig.supervisor(None)
    await sup.start()
    await until(lambda: rig.value("zaroz_route_discovery_total", "error") >= 2)
    assert sup.readiness() == (False, "workload discovery has not succeeded yet")
    assert sup.tailers == {}
    await sup.stop()


async def test_empty_page_behind_head_backs_off_instead_of_spinning():
    class Stuck:
        async def events(self, workload: str, after: int, limit: int, wait: float) -> Page:
            return Page([], 5)  # claims five events, sends none

    registry = Registry()
    t = Tailer(Stuck(), "wl-1", Pipeline(registry).workload("wl-1"),  # type: ignore[arg-type]
               RouteMetrics(registry), backoff=fast_backoff())
    delays = [await t.poll() for _ in range(3)]
    assert all(d > 0 for d in delays) and t.backoff.failures == 3
    assert not t.caught_up and t.log.applied_through == 0
    assert registry["zaroz_route_head_seq"].labels("wl-1").value == 5


async def test_a_page_waits_for_the_gate_before_it_is_applied():
    class OnePage:
        async def events(self, workload: str, after: int, limit: int, wait: float) -> Page:
            return Page(envelopes(3)[after:], 3)

    registry = Registry()
    wl = Pipeline(registry).workload("wl-1")
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asked: list[int] = []

    def ahead() -> asyncio.Future[None] | None:
        asked.append(wl.applied_through)
        return None if gate.done() else gate

    t = Tailer(OnePage(), "wl-1", wl, RouteMetrics(registry),  # type: ignore[arg-type]
               backoff=fast_backoff(), idle_delay=0.01, gate=ahead)
    t.start()
    await until(lambda: asked)
    for _ in range(5):
        await asyncio.sleep(0)
    assert wl.applied_through == 0  # the page waits while the gate is shut
    gate.set_result(None)
    await until(lambda: t.caught_up)
    await t.stop()
    assert wl.applied_through == 3 and asked[0] == 0


async def test_tailers_catching_up_have_a_bounded_number_of_requests_in_flight():
    """After a restart every tailer's first requests at once would be one connection each to
    the route, more than its listen backlog holds; until a tailer catches up its requests take
    one of the supervisor's slots (32), and readiness still waits for every tailer."""
    in_flight = [0]  # every request
    first = [0]  # those with wait=0: a tailer not caught up yet
    most = [0]
    asked: dict[str, list[float]] = {}

    class Counting:
        async def events(self, workload: str, after: int, limit: int, wait: float) -> Page:
            asked.setdefault(workload, []).append(wait)
            in_flight[0] += 1
            if wait > 0:  # a caught-up tailer's long poll: held (takes no slot)
                try:
                    await asyncio.sleep(wait)
                    return Page([], after)
                finally:
                    in_flight[0] -= 1
            first[0] += 1
            most[0] = max(most[0], first[0])
            try:
                await asyncio.sleep(0.01)
                return Page(envelopes(2)[after:], 2)
            finally:
                in_flight[0] -= 1
                first[0] -= 1

    registry = Registry()
    names = [f"wl-{i}" for i in range(100)]
    sup = TailSupervisor(Counting(), Pipeline(registry), RouteMetrics(registry),  # type: ignore[arg-type]
                         names, backoff_factory=fast_backoff, wait=30, idle_delay=0.01)
    await sup.start()
    await until(sup.ready)
    await until(lambda: in_flight[0] == 100)  # every long poll held at once: they take no slot
    await sup.stop()
    assert most[0] == 32  # first pages in flight at once: the slots, all used
    assert all(sup.pipeline.logs[w].applied_through == 2 for w in names)
    assert all(asked[w][-1] == 30 for w in names)
