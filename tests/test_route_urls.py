"""The events URL RouteClient builds itself (already encoded, no params dict): what the server
receives for workload ids that need quoting, for a base URL with a path, and for the query."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from exporter.sources.route import RouteClient


@pytest.fixture
async def echo() -> AsyncIterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    seen: list[tuple[str, dict[str, str]]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((request.match_info["workload"], dict(request.query)))
        return web.json_response({"events": [], "head_seq": 0})

    app = web.Application()
    app.router.add_get("/prefix/v1/workloads/{workload}/events", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/prefix/", seen
    await runner.cleanup()


@pytest.mark.parametrize("workload", ["wl-1", "a/b", "with space", "50%", "ü-ß", "q?x=1&y#z"])
async def test_workload_ids_and_query_reach_the_route_as_given(echo, workload):
    url, seen = echo
    async with aiohttp.ClientSession() as session:
        page = await RouteClient(session, url).events(workload, 41, 1000, 2.5)
    assert page.events == [] and page.head_seq == 0
    assert seen == [(workload, {"after": "41", "limit": "1000", "wait": "3"})]
