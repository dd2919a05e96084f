"""The watch stream reader and error mapping, against a tiny server that splits lines on purpose."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from exporter.sources.http import Expired, Rejected, RetryLater, TransportError, Unauthorized
from exporter.sources.kube.api import KubeApi
from exporter.sources.kube.config import from_url

OBJ = {"metadata": {"name": "x", "namespace": "a", "resourceVersion": "7"}}


def line(type_: str, obj: Any = OBJ) -> bytes:
    return orjson.dumps({"type": type_, "object": obj}) + b"\n"


async def serve(chunks: list[bytes], status: int = 200,
                headers: dict[str, str] | None = None) -> tuple[web.AppRunner, str]:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=status, headers=headers)
        resp.content_type = "application/json"
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for c in chunks:
            await resp.write(c)
            await asyncio.sleep(0.01)  # each write reaches the client as its own chunk
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def read(session: aiohttp.ClientSession, chunks: list[bytes], **kw: Any) -> list[dict]:
    runner, url = await serve(chunks, **kw)
    got: list[dict] = []
    try:
        api = KubeApi(session, from_url(url))
        async with (
            api.watch("a", resource_version="5", timeout_seconds=5) as stream,
            aclosing(stream.events()) as evs,
        ):
            async for ev in evs:
                got.append(ev)
    except Exception as e:
        e.got = got  # type: ignore[attr-defined]
        raise
    finally:
        await runner.cleanup()
    return got


async def test_lines_split_across_chunks(session):
    a, b = line("ADDED"), line("BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    chunks = [a[:5], a[5:20], a[20:] + b[:3], b[3:], b"\n"]
    got = await read(session, chunks)
    assert [e["type"] for e in got] == ["ADDED", "BOOKMARK"]
    assert got[0]["object"] == OBJ


async def test_a_truncated_final_line_is_a_dropped_stream(session):
    a = line("ADDED")
    with pytest.raises(TransportError) as exc:
        await read(session, [a, line("MODIFIED")[:30]])
    assert exc.value.result == "truncated" and len(exc.value.got) == 1  # type: ignore[attr-defined]


async def test_error_events_and_bad_lines(session):
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    with pytest.raises(Expired):
        await read(session, [line("ERROR", gone)])
    busy = {"kind": "Status", "code": 500, "message": "etcd", "details": {"retryAfterSeconds": 2}}
    with pytest.raises(RetryLater) as exc:
        await read(session, [line("ERROR", busy)])
    assert exc.value.retry_after == 2 and exc.value.result == "500"
    with pytest.raises(TransportError) as bad:
        await read(session, [b"{not json\n"])
    assert bad.value.result == "invalid_body"


@pytest.mark.parametrize(
    ("status", "exc", "result"),
    [(410, Expired, "410"), (429, RetryLater, "429"), (503, RetryLater, "503"),
     (401, Unauthorized, "401"), (403, Unauthorized, "403"), (400, Rejected, "400"),
     (404, Rejected, "404"), (418, Rejected, "4xx")],
)
async def test_refused_requests(session, status, exc, result):
    body = orjson.dumps({"kind": "Status", "code": status, "message": "no"})
    runner, url = await serve([body], status=status, headers={"Retry-After": "4"})
    try:
        api = KubeApi(session, from_url(url))
        with pytest.raises(exc) as got:
            await api.list(None, limit=10)
        assert got.value.result == result
        if exc is RetryLater:
            assert got.value.retry_after == 4
        with pytest.raises(exc):
            async with api.watch(None, resource_version="3", timeout_seconds=5):
                pass
    finally:
        await runner.cleanup()


async def test_a_watch_needs_a_version(session):
    api = KubeApi(session, from_url("http://127.0.0.1:1"))
    with pytest.raises(ValueError):
        async with api.watch(None, resource_version="", timeout_seconds=5):
            pass
