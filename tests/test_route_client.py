"""RouteClient against the simulated route (and a tiny odd one), and TokenFile rotation."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from email.utils import formatdate
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from exporter.sources import token as token_module
from exporter.sources.http import (
    CredentialsUnavailable,
    NotFound,
    Rejected,
    RetryLater,
    TransportError,
    Unauthorized,
)
from exporter.sources.route import CursorExpired, RouteClient, WorkloadRef
from exporter.sources.token import TokenError, TokenFile
from tests.envelopes import Log
from zaroz_sim.config import Workload
from zaroz_sim.faults import FaultPlan, drop, expire, http_status, slow, truncate
from zaroz_sim.route import RouteServer

WL = [Workload("wl-1", "web"), Workload("wl-2", "batch")]


def envelopes(n: int) -> list[dict]:
    log = Log()
    for i in range(n):
        log.add("unit.created", unit=f"u{i}", at_ms=i)
    return log.events


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
async def server() -> AsyncIterator[tuple[RouteServer, str]]:
    srv = RouteServer(WL, token="secret", faults=FaultPlan())
    url = await srv.start()
    srv.append("wl-1", envelopes(5))
    yield srv, url
    await srv.stop()


@pytest.fixture
def token(tmp_path: Path) -> TokenFile:
    p = tmp_path / "token"
    p.write_text("secret\n")
    return TokenFile(p)


async def test_workloads_and_pages(server, session, token):
    _, url = server
    c = RouteClient(session, url, token, timeout_margin=2)
    assert await c.workloads() == [WorkloadRef("wl-1", "web"), WorkloadRef("wl-2", "batch")]
    page = await c.events("wl-1", after=1, limit=2, wait=0)
    assert [e["seq"] for e in page.events] == [2, 3]
    assert page.head_seq == 5 and page.result == "200"
    empty = await c.events("wl-2", after=0, limit=10, wait=0)
    assert empty.events == [] and empty.head_seq == 0


@pytest.mark.parametrize(
    ("fault", "exc", "result"),
    [
        (http_status(503), RetryLater, "503"),
        (http_status(500), RetryLater, "500"),
        # aiohttp resends an idempotent request once after a disconnect: two drops surface.
        (drop(times=2), TransportError, "connection"),
        (truncate(), TransportError, "truncated"),
        (expire(4), CursorExpired, "410"),
    ],
)
async def test_faults_map_to_exceptions_with_result_labels(server, session, token, fault, exc,
                                                           result):
    srv, url = server
    srv.faults.add(fault)
    c = RouteClient(session, url, token, timeout_margin=2)
    with pytest.raises(exc) as info:
        await c.events("wl-1", after=0, limit=10, wait=0)
    assert info.value.result == result
    after = 0
    if exc is CursorExpired:
        assert info.value.oldest_seq == 4
        after = 3
    # The next request is clean again.
    page = await c.events("wl-1", after=after, limit=10, wait=0)
    assert [e["seq"] for e in page.events] == list(range(after + 1, 6))


async def test_429_carries_retry_after(server, session, token):
    srv, url = server
    srv.faults.add(http_status(429, retry_after=7))
    with pytest.raises(RetryLater) as info:
        await RouteClient(session, url, token).events("wl-1", 0, 10, 0)
    assert (info.value.status, info.value.retry_after, info.value.result) == (429, 7.0, "429")


async def test_4xx_answers(server, session, token):
    _, url = server
    c = RouteClient(session, url, token)
    with pytest.raises(NotFound) as nf:
        await c.events("nope", 0, 10, 0)
    assert nf.value.result == "404"
    with pytest.raises(Rejected) as bad:
        await c.events("wl-1", 0, 0, 0)
    assert (bad.value.code, bad.value.result) == ("invalid_limit", "400")
    wrong = TokenFile(token.path.with_name("wrong"))
    wrong.path.write_text("nope")
    with pytest.raises(Unauthorized) as un:
        await RouteClient(session, url, wrong).events("wl-1", 0, 10, 0)
    assert un.value.result == "401"
    with pytest.raises(Unauthorized):
        await RouteClient(session, url, None).workloads()


async def test_timeout_is_wait_plus_margin(server, session, token):
    srv, url = server
    srv.faults.add(slow(1.0))
    c = RouteClient(session, url, token, timeout_margin=0.2)
    with pytest.raises(TransportError) as info:
        await c.events("wl-1", 0, 10, 0)
    assert info.value.result == "timeout"


async def test_missing_token_file_sends_nothing(server, session, tmp_path):
    srv, url = server
    c = RouteClient(session, url, TokenFile(tmp_path / "absent"))
    with pytest.raises(CredentialsUnavailable) as info:
        await c.events("wl-1", 0, 10, 0)
    assert info.value.result == "token"
    assert srv.requests["wl-1"] == 0


async def test_connection_refused_is_a_connection_error(session):
    c = RouteClient(session, "http://127.0.0.1:1", None, timeout_margin=2)
    with pytest.raises(TransportError) as info:
        await c.events("wl-1", 0, 10, 0)
    assert info.value.result == "connection"


# Answers the simulator does not give --------------------------------------------------------


@pytest.fixture
async def odd() -> AsyncIterator[str]:
    async def handler(request: web.Request) -> web.Response:
        kind = request.match_info["workload"]
        if kind == "html":
            return web.Response(text="<html>proxy</html>", content_type="text/html")
        if kind == "shape":
            return web.json_response({"events": {}, "head_seq": "3"})
        if kind == "date":
            return web.Response(status=503, headers={"Retry-After": formatdate(usegmt=True)})
        if kind == "teapot":
            return web.Response(status=418, text="short and stout")
        if kind == "gone":
            return web.json_response({"error": {"code": "cursor_expired"}}, status=410)
        return web.Response(status=403, text="<html>forbidden</html>")

    runner = web.AppRunner(web.Application())
    runner.app.router.add_get("/v1/workloads/{workload}/events", handler)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


@pytest.mark.parametrize(
    ("workload", "exc", "result"),
    [
        ("html", TransportError, "invalid_body"),
        ("shape", TransportError, "invalid_body"),
        ("gone", TransportError, "invalid_body"),
        ("date", RetryLater, "503"),
        ("teapot", Rejected, "4xx"),
        ("forbidden", Unauthorized, "403"),
    ],
)
async def test_odd_answers(odd, session, workload, exc, result):
    with pytest.raises(exc) as info:
        await RouteClient(session, odd).events(workload, 0, 10, 0)
    assert info.value.result == result
    if workload == "date":
        assert info.value.retry_after is not None and 0 <= info.value.retry_after <= 1


# TokenFile ---------------------------------------------------------------------------------


def test_token_is_stripped_cached_and_reread_on_change(tmp_path, monkeypatch):
    opened: list[str] = []

    def counting_open(path, *a, **kw):  # the module's `open`: each read of the token file
        opened.append(str(path))
        return open(path, *a, **kw)

    monkeypatch.setattr(token_module, "open", counting_open, raising=False)
    p = tmp_path / "token"
    p.write_text("  abc\n")
    t = TokenFile(p)
    assert t.get() == "abc" and t.get() == "abc"
    assert opened == [str(p)]
    p.write_text("defg\n")  # size changes
    assert t.get() == "defg" and opened == [str(p)] * 2


def test_token_follows_a_kubernetes_style_symlink_swap(tmp_path):
    # kubelet: token -> ..data/token, ..data -> ..<timestamp>; rotation swaps ..data atomically.
    def publish(name: str, value: str) -> None:
        d = tmp_path / name
        d.mkdir()
        (d / "token").write_text(value)  # same size and, possibly, the same mtime as before
        tmp = tmp_path / "..data_tmp"
        tmp.symlink_to(name)
        os.replace(tmp, tmp_path / "..data")

    publish("..v1", "tok1")
    (tmp_path / "token").symlink_to("..data/token")
    t = TokenFile(tmp_path / "token")
    assert t.get() == "tok1"
    publish("..v2", "tok2")
    assert t.get() == "tok2"


def test_token_problems_raise_and_log_once(tmp_path, caplog):
    p = tmp_path / "token"
    t = TokenFile(p)
    with caplog.at_level(logging.INFO, logger="exporter.sources.token"):
        for _ in range(3):
            with pytest.raises(TokenError):
                t.get()
        p.write_text("   \n")
        with pytest.raises(TokenError, match="empty"):
            t.get()
        p.write_text("ok")
        assert t.get() == "ok"
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages  # missing (once), empty (once), readable again
    assert messages[-1] == "token file readable again"
