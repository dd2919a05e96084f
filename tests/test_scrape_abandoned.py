"""A scrape whose scraper has hung up (its scrape timeout passed) is not rendered: aiohttp runs
the handler on regardless, and on a loaded machine a Prometheus whose scrapes time out would
queue renders nobody reads behind one another until no scrape ever finishes in time."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import exporter.web.app as app
from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.serve import start

ABANDONED = 20


async def test_abandoned_scrapes_are_not_rendered(monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture,
                                                  tmp_path: Path) -> None:
    renders = 0
    real = app.render_checkpointed_async

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal renders
        renders += 1
        return await real(*args, **kwargs)

    monkeypatch.setattr(app, "render_checkpointed_async", counted)
    (tmp_path / "secret").write_text("s\n")
    args = build_parser().parse_args(["serve", "--listen", "127.0.0.1:0", "--kube", "off",
                                      "--webhook-secret-file", str(tmp_path / "secret")])
    running = await start(ServeConfig.from_args(args))
    host, _, port = running.url.removeprefix("http://").rstrip("/").rpartition(":")
    try:
        with caplog.at_level(logging.ERROR, logger="aiohttp.server"):
            for _ in range(ABANDONED):  # ask, and hang up before the answer (a timed-out scrape)
                _, writer = await asyncio.open_connection(host, int(port))
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
                await writer.drain()
                writer.close()
                await writer.wait_closed()
            async with aiohttp.ClientSession() as s, s.get(f"{running.url}/metrics") as r:
                assert r.status == 200
                assert "zaroz_exporter_build_info" in await r.text()
            await asyncio.sleep(0)
        assert renders <= 1 + ABANDONED // 4, f"{renders} renders for 1 scrape read"
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert not errors, errors
    finally:
        await running.stop()
