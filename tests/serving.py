"""`zaroz-exporter serve` as a real subprocess, and scrapers that read it as Prometheus would."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench._common import free_port
from tests.simlogs import parse

ROOT = Path(__file__).resolve().parent.parent
MAIN = "import sys; from exporter.cli import main; sys.exit(main())"


class Serve:
    """One `serve` process on a fixed port; `kill()` is a SIGKILL, `start()` a new process."""

    def __init__(self, *args: str, port: int | None = None) -> None:
        self.args = args
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", MAIN, "serve", "--listen", f"127.0.0.1:{self.port}",
            "--kube", "off", "--log-level", "warning", *self.args,
            cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as s:
            while True:
                try:
                    async with s.get(self.url + "/healthz") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                assert self.proc.returncode is None, "serve exited"
                assert time.monotonic() < deadline, "serve did not start"
                await asyncio.sleep(0.05)

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()

    async def terminate(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            await self.proc.wait()


async def scrape(url: str, session: aiohttp.ClientSession) -> dict[Any, float] | None:
    """One scrape's samples, or None when the target is down (as Prometheus' up == 0)."""
    try:
        async with session.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
            if r.status != 200:
                return None
            return parse(await r.text())
    except (aiohttp.ClientError, TimeoutError):
        return None


class Scraper:
    """Scrapes every `interval` seconds and keeps every successful scrape, in order."""

    def __init__(self, url: str, interval: float) -> None:
        self.url = url
        self.interval = interval
        self.scrapes: list[dict[Any, float]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async with aiohttp.ClientSession() as s:
            while True:
                got = await scrape(self.url, s)
                if got is not None:
                    self.scrapes.append(got)
                await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class Feed:
    """Releases each workload's log to a simulated route (zaroz_sim RouteServer) in steps;
    `fed` is how many events of each workload were released so far."""

    def __init__(self, route: Any, logs: dict[str, list[dict[str, Any]]]) -> None:
        self.route, self.logs = route, logs
        self.fed = dict.fromkeys(logs, 0)

    def to(self, fraction: float) -> None:
        for w, evs in self.logs.items():
            upto = int(len(evs) * fraction)
            self.route.append(w, evs[self.fed[w]:upto])
            self.fed[w] = max(self.fed[w], upto)
