"""The overview's HTTP side: `/`, `/api/overview`, the dashboards' JSON and the docs, and the
timer that keeps the histogram ring (`history.History`) filled."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from exporter.overview import page
from exporter.overview.history import History
from exporter.overview.live import Live
from exporter.sinks.metrics.family import Registry
from exporter.sources.backoff import Backoff
from exporter.sources.tasks import supervised

Readiness = Callable[[], tuple[bool, str]]
SNAPSHOT_EVERY_S = 10.0


def asset_dir(name: str, repo_path: str) -> Path | None:
    """Wheels ship `exporter/<name>`; editable installs read the repo's `repo_path`."""
    packaged = Path(str(importlib.resources.files("exporter") / name))
    if packaged.is_dir():
        return packaged
    repo = Path(__file__).resolve().parents[2] / repo_path
    return repo if repo.is_dir() else None


class Overview:
    def __init__(self, registry: Registry, readiness: Readiness, *,
                 clock: Callable[[], float] = time.time, step: float = SNAPSHOT_EVERY_S,
                 extra_links: dict[str, str] | None = None) -> None:
        self.registry = registry
        self.readiness = readiness
        self.clock = clock
        self.live = Live(registry)  # the sums, kept up to date from what changed
        self.history = History(registry, step=step, snapshot=self.live.snapshot)
        self.history.tick(clock())  # the zero point: what the window falls back to
        self.last_scrape: float | None = None
        self.extra_links = extra_links or {}
        self.dashboards = asset_dir("dashboards", "dashboards/json")
        self.docs = asset_dir("docs", "docs")

    def links(self) -> dict[str, str]:
        """Relative, so the page works behind a proxy's path prefix too."""
        out = {"metrics": "/metrics", "readyz": "/readyz", "healthz": "/healthz",
               "api/overview": "/api/overview", **self.extra_links}
        if self.dashboards is not None:
            for p in sorted(self.dashboards.glob("*.json")):
                out[f"dashboards/{p.name}"] = p.stem
        if self.docs is not None:
            for p in sorted(self.docs.glob("*.md")):
                out[f"docs/{p.name}"] = f"docs: {p.stem}"
        return out

    def install(self, app: web.Application) -> None:
        app.router.add_get("/", self.page)
        app.router.add_get("/api/overview", self.api)
        app.router.add_get("/dashboards/{name}", self.dashboard)
        app.router.add_get("/docs/{name}", self.doc)
        app.cleanup_ctx.append(self._ticker)

    def scraped(self) -> None:
        self.last_scrape = self.clock()

    def data(self) -> dict[str, Any]:
        now = self.clock()
        self.history.tick(now)
        return self.live.data(self.history, self.readiness, now, self.last_scrape)

    async def _data(self) -> dict[str, Any]:
        while self.live.catch_up():  # a first look at 100k UnitSignal rows: in slices
            await asyncio.sleep(0)
        return self.data()

    async def page(self, request: web.Request) -> web.Response:
        return web.Response(text=page.render(await self._data(), self.links()),
                            content_type="text/html")

    async def api(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(await self._data()),
                            content_type="application/json")

    async def dashboard(self, request: web.Request) -> web.Response:
        return self._file(self.dashboards, request.match_info["name"], ".json",
                          "application/json")

    async def doc(self, request: web.Request) -> web.Response:
        return self._file(self.docs, request.match_info["name"], ".md", "text/markdown")

    @staticmethod
    def _file(base: Path | None, name: str, ext: str, ctype: str) -> web.Response:
        if base is None or not name.endswith(ext) or "/" in name or name.startswith("."):
            raise web.HTTPNotFound()
        path = base / name
        if not path.is_file():
            raise web.HTTPNotFound()
        return web.Response(body=path.read_bytes(), content_type=ctype, charset="utf-8")

    async def _ticker(self, app: web.Application) -> AsyncIterator[None]:
        async def loop() -> None:
            while True:
                await asyncio.sleep(self.history.step)
                self.history.tick(self.clock())

        died = self.registry.counter("zaroz_exporter_task_restarts_total").labels("overview").inc
        task = asyncio.create_task(supervised("overview", loop, died, Backoff(1.0, 60.0)),
                                   name="overview-snapshots")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
