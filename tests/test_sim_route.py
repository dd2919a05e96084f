"""The simulated events route speaks platform.md 2a exactly, and its faults behave as scripted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.jsonclient import JsonClient
from zaroz_sim import faults
from zaroz_sim.config import SimConfig
from zaroz_sim.faults import FaultKind, FaultPlan
from zaroz_sim.route import LiveFeed, RouteServer
from zaroz_sim.scenario import Simulator

S = 1_000_000_000
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def make_log(n: int = 200) -> dict[str, list[dict[str, Any]]]:
    cfg = SimConfig(seed=5, workloads=2, arrival_rate=0.5)
    events = Simulator(cfg).events_until(cfg.start_ns + 600 * S)
    out = {wl: evs[:n] for wl, evs in events.items()}
    assert all(len(evs) == n for evs in out.values())
    return out


LOG = make_log()


class Client(JsonClient):
    """A thin client; fresh connection per request so a dropped one cannot be retried."""

    def __init__(self, base: str, session: aiohttp.ClientSession) -> None:
        super().__init__(base, session, AUTH)

    async def events(self, wl: str = "wl-1", **params: Any) -> tuple[int, Any, Any]:
        query = {"after": 0, "limit": 1000, "wait": 0} | params
        return await self.get(f"/v1/workloads/{wl}/events", **query)


async def serve(server: RouteServer) -> AsyncIterator[tuple[RouteServer, Client]]:
    for wl, evs in LOG.items():
        server.append(wl, evs)
    base = await server.start()
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield server, Client(base, session)
    await server.stop()


@pytest.fixture
async def route() -> AsyncIterator[tuple[RouteServer, Client]]:
    wls = Simulator(SimConfig(seed=5, workloads=2)).workloads
    async for pair in serve(RouteServer(wls, token=TOKEN)):
        yield pair


async def test_workload_list_and_auth(route: tuple[RouteServer, Client]) -> None:
    server, client = route
    status, body, _ = await client.get("/v1/workloads")
    assert status == 200
    assert body == {"workloads": [{"id": "wl-1", "slug": "web-frontend"},
                                  {"id": "wl-2", "slug": "match-server"}]}  # fmt: skip
    for headers in ({"Authorization": "Bearer wrong"}, {"X-None": "1"}):
        status, body, resp_headers = await client.get("/v1/workloads", headers=headers)
        assert status == 401 and body["error"]["code"] == "unauthorized"
        assert resp_headers["WWW-Authenticate"] == "Bearer"
        status, body, _ = await client.get(
            "/v1/workloads/wl-1/events", headers=headers, after=0, limit=10, wait=0
        )
        assert status == 401 and body["error"]["code"] == "unauthorized"
    server.token = "rotated"
    assert (await client.get("/v1/workloads"))[0] == 401
    rotated = {"Authorization": "Bearer rotated"}
    assert (await client.get("/v1/workloads", headers=rotated))[0] == 200


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"after": None}, "invalid_after"),
        ({"after": "x"}, "invalid_after"),
        ({"after": "1.5"}, "invalid_after"),
        ({"after": -1}, "invalid_after"),
        ({"limit": None}, "invalid_limit"),
        ({"limit": 0}, "invalid_limit"),
        ({"limit": 1001}, "invalid_limit"),
        ({"limit": "ten"}, "invalid_limit"),
        ({"wait": None}, "invalid_wait"),
        ({"wait": -1}, "invalid_wait"),
        ({"wait": 61}, "invalid_wait"),
        ({"wait": "0.5"}, "invalid_wait"),
    ],
)
async def test_bad_parameters(
    route: tuple[RouteServer, Client], params: dict[str, Any], code: str
) -> None:
    _, client = route
    query = {"after": 0, "limit": 10, "wait": 0} | params
    query = {k: v for k, v in query.items() if v is not None}
    status, body, _ = await client.get("/v1/workloads/wl-1/events", **query)
    assert status == 400
    assert body["error"]["code"] == code and body["error"]["message"]


async def test_unknown_workload(route: tuple[RouteServer, Client]) -> None:
    server, client = route
    status, body, _ = await client.events("wl-9")
    assert status == 404 and body["error"]["code"] == "unknown_workload"
    assert server.requests["wl-9"] == 1


async def test_pagination(route: tuple[RouteServer, Client]) -> None:
    server, client = route
    seen: list[dict[str, Any]] = []
    after = 0
    while True:
        status, body, _ = await client.events(after=after, limit=37)
        assert status == 200 and body["head_seq"] == 200
        if not body["events"]:
            break
        assert len(body["events"]) <= 37
        assert body["events"][0]["seq"] == after + 1
        seen.extend(body["events"])
        after = body["events"][-1]["seq"]
    assert seen == LOG["wl-1"]
    assert server.requests["wl-1"] == 7 and server.requests["wl-2"] == 0
    status, body, _ = await client.events(after=500)  # a cursor ahead of the log
    assert status == 200 and body == {"events": [], "head_seq": 200}


async def test_retention_410() -> None:
    wls = Simulator(SimConfig(seed=5, workloads=2)).workloads
    async for server, client in serve(RouteServer(wls, token=TOKEN, retain_last=50)):
        assert server.oldest_seq("wl-1") == 151
        status, body, _ = await client.events(after=0)
        assert status == 410
        assert body["error"]["code"] == "cursor_expired" and body["oldest_seq"] == 151
        status, body, _ = await client.events(after=150, limit=5)
        assert status == 200 and [e["seq"] for e in body["events"]] == [151, 152, 153, 154, 155]


async def test_long_poll_returns_on_append(route: tuple[RouteServer, Client]) -> None:
    server, client = route
    cfg = SimConfig(seed=5, workloads=2, arrival_rate=0.5)
    more = Simulator(cfg).events_until(cfg.start_ns + 600 * S)["wl-1"][200:203]

    async def later() -> None:
        await asyncio.sleep(0.2)
        server.append("wl-1", more)

    started = time.monotonic()
    task = asyncio.create_task(later())
    status, body, _ = await client.events(after=200, wait=10)
    await task
    assert 0.15 < time.monotonic() - started < 2
    assert status == 200 and body == {"events": more, "head_seq": 203}


async def test_long_poll_times_out_empty(route: tuple[RouteServer, Client]) -> None:
    _, client = route
    started = time.monotonic()
    status, body, _ = await client.events("wl-2", after=200, wait=1)
    assert 0.95 < time.monotonic() - started < 3
    assert status == 200 and body == {"events": [], "head_seq": 200}


async def test_append_rejects_going_backwards(route: tuple[RouteServer, Client]) -> None:
    server, _ = route
    with pytest.raises(ValueError):
        server.append("wl-1", LOG["wl-1"][-1:])


@pytest.mark.parametrize(("status", "retry_after"), [(500, None), (502, None), (503, None),
                                                     (503, 7), (429, 2)])  # fmt: skip
async def test_fault_status(
    route: tuple[RouteServer, Client], status: int, retry_after: int | None
) -> None:
    server, client = route
    server.faults.add(faults.http_status(status, retry_after, workload="wl-1", times=2))
    assert (await client.events("wl-2"))[0] == 200  # other workload untouched
    for _ in range(2):
        got, body, headers = await client.events(after=5)
        assert got == status and body["error"]["code"]
        assert headers.get("Retry-After") == (None if retry_after is None else str(retry_after))
    got, body, _ = await client.events(after=5)
    assert got == 200 and body["events"][0]["seq"] == 6
    assert server.faults.applied == [("wl-1", FaultKind.STATUS)] * 2


async def test_fault_drop(route: tuple[RouteServer, Client]) -> None:
    server, client = route
    # aiohttp retries an idempotent request once after a disconnect: drop twice to see it
    server.faults.add(faults.drop(times=2))
    with pytest.raises(aiohttp.ClientConnectionError):
        await client.events()
    assert server.requests["wl-1"] == 2
    assert (await client.events())[0] == 200


async def test_fault_truncate(route: tuple[RouteServer, Client]) -> None:
    server, client = route
    server.faults.add(faults.truncate())
    with pytest.raises(aiohttp.ClientPayloadError):
        await client.events()
    assert (await client.events())[0] == 200


async def test_fault_expire(route: tuple[RouteServer, Client]) -> None:
    server, client = route
    server.faults.add(faults.expire(40, workload="wl-1"))
    status, body, _ = await client.events(after=100)  # forced, whatever the cursor
    assert status == 410 and body["oldest_seq"] == 40
    status, body, _ = await client.events(after=10)  # and those events are gone for good
    assert status == 410 and body["oldest_seq"] == 40
    status, body, _ = await client.events(after=39, limit=2)
    assert status == 200 and [e["seq"] for e in body["events"]] == [40, 41]
    assert (await client.events("wl-2", after=0))[0] == 200


async def test_fault_lose(route: tuple[RouteServer, Client]) -> None:
    server, client = route
    server.faults.add(faults.lose([5, 6, 201]))
    status, body, _ = await client.events(after=0, limit=8)
    assert status == 200 and [e["seq"] for e in body["events"]] == [1, 2, 3, 4, 7, 8, 9, 10]
    status, body, _ = await client.events(after=4, limit=1)  # gone for good
    assert [e["seq"] for e in body["events"]] == [7]
    cfg = SimConfig(seed=5, workloads=2, arrival_rate=0.5)
    server.append("wl-1", Simulator(cfg).events_until(cfg.start_ns + 600 * S)["wl-1"][200:202])
    status, body, _ = await client.events(after=200)  # a lost future seq never shows up
    assert [e["seq"] for e in body["events"]] == [202] and body["head_seq"] == 202


async def test_fault_slow(route: tuple[RouteServer, Client]) -> None:
    server, client = route
    server.faults.add(faults.slow(0.4, trickle_s=0.1))
    started = time.monotonic()
    status, body, _ = await client.events(limit=50)
    assert time.monotonic() - started >= 0.4 + 0.3
    assert status == 200 and body["events"] == LOG["wl-1"][:50]


async def test_random_faults_are_seeded(route: tuple[RouteServer, Client]) -> None:
    server, client = route
    rates = {FaultKind.STATUS: 0.5}
    server.faults = FaultPlan(rates=rates, seed=3)
    statuses = [(await client.events())[0] for _ in range(12)]
    server.faults = FaultPlan(rates=rates, seed=3)
    again = [(await client.events())[0] for _ in range(12)]
    assert statuses == again
    assert 200 in statuses and set(statuses) - {200} <= {429, 500, 502, 503}
    assert len(set(statuses)) > 1


def test_random_plan_picks_meaningful_faults() -> None:
    plan = FaultPlan(rates={FaultKind.EXPIRE: 1.0}, seed=1)
    fault = plan.take("wl-1", after=10, head=100)
    assert fault is not None and fault.kind is FaultKind.EXPIRE and 12 <= fault.oldest_seq <= 100
    assert plan.take("wl-1", after=100, head=100) is None  # nothing to expire past the head
    plan = FaultPlan(rates={FaultKind.LOSE: 1.0}, seed=1)
    fault = plan.take("wl-1", after=10, head=20)
    assert fault is not None and all(11 <= s <= 20 for s in fault.seqs)


async def test_live_feed_follows_the_clock() -> None:
    wall = [1_800_000_000 * S]
    server = RouteServer(SimConfig(workloads=2).workload_list())
    feed = LiveFeed(server, SimConfig(seed=9, workloads=2), time_scale=2.0, clock=lambda: wall[0])
    assert feed.simulator.config.start_ns == wall[0]
    assert feed.tick() == 2  # the initial units.scaled of each workload
    wall[0] += 60 * S
    assert feed.sim_now() == 1_800_000_000 * S + 120 * S
    appended = feed.tick()
    assert appended > 20
    for wl in ("wl-1", "wl-2"):
        assert server.head_seq(wl) == feed.simulator.truth.last_seq[wl]


async def test_live_feed_task() -> None:
    server = RouteServer(SimConfig(workloads=1).workload_list())
    feed = LiveFeed(server, SimConfig(seed=2, workloads=1), time_scale=200.0, interval_s=0.02)
    feed.start()
    deadline = time.monotonic() + 30  # a condition, not a fixed pause: a busy machine is slow
    while server.head_seq("wl-1") <= 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await feed.stop()
    assert server.head_seq("wl-1") > 1
