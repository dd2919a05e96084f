"""A real Prometheus' HTTP API, for the tests that start one: read synchronously (urllib), or
in the event loop (aiohttp: `get_async`, `AsyncProm`, `wait_async`) by the tests whose own
servers run in that loop."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status == 200


class Prom:
    def __init__(self, base: str) -> None:
        self.base = base

    def query(self, expr: str) -> dict[str, Any]:
        q = urllib.parse.urlencode({"query": expr})
        try:
            return get(f"{self.base}/api/v1/query?{q}")
        except urllib.error.HTTPError as e:
            return json.load(e)

    def result(self, expr: str) -> list[dict[str, Any]]:
        body = self.query(expr)
        assert body["status"] == "success", f"{expr}: {body}"
        return body["data"]["result"]


def wait(what: str, cond: Callable[[], Any], timeout: float,
         why: Callable[[], Any] | None = None) -> None:
    """Until `cond()` holds (errors of a server not up yet count as not yet); then fail with
    `what`, the last error, and `why()` when given."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except (OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what} (last error: {last})"
                + (f": {why()}" if why else ""))


async def get_async(session: aiohttp.ClientSession, url: str, **params: str) -> Any:
    """`get` in the event loop (any JSON API: Prometheus', Alertmanager's)."""
    async with session.get(url, params=params, timeout=aiohttp.ClientTimeout(total=5)) as r:
        return await r.json()


class AsyncProm:
    """`Prom` in the event loop."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def query(self, expr: str) -> dict[str, Any]:
        body: dict[str, Any] = await get_async(self.session, f"{self.base}/api/v1/query",
                                               query=expr)
        return body

    async def result(self, expr: str) -> list[dict[str, Any]]:
        body = await self.query(expr)
        assert body["status"] == "success", f"{expr}: {body}"
        return body["data"]["result"]


async def wait_async(what: str, cond: Callable[[], Awaitable[Any]], timeout: float,
                     why: Callable[[], Awaitable[Any]] | None = None) -> None:
    """`wait` for a coroutine condition, sleeping in the event loop; `why` is awaited too."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if await cond():
                return
        except (aiohttp.ClientError, OSError, ValueError, KeyError) as e:
            last = e
        await asyncio.sleep(0.5)
    pytest.fail(f"timed out waiting for {what} (last error: {last})"
                + (f": {await why()}" if why else ""))
