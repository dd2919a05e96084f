"""A webhook delivery is answered 2xx only once a checkpoint that covers it is durable
(platform.md 2b: the platform never redelivers a 2xx): SIGKILLs of the real `serve` process in
the middle of a webhook-only stream lose nothing and count nothing twice, and a delivery whose
checkpoint is blocked or fails is never answered 2xx."""

from __future__ import annotations

import asyncio
import errno
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.serve import start
from tests.envelopes import Log
from tests.serving import Scraper, Serve, scrape
from tests.simlogs import assert_matches_truth, finite_logs, value
from tests.waiting import until
from zaroz_sim.webhook import WebhookSender, delivery_plan

SECRET = "durable-secret-0123456789"


class Platform:
    """The platform's webhook sender: `concurrency` deliveries in flight per workload, each
    delivery sent again (after a connection error, a reset, a 5xx) until it is answered 2xx,
    and never after."""

    def __init__(self, url: str, plans: dict[str, list[dict[str, Any]]],
                 concurrency: int = 4) -> None:
        self.url = url
        self.plans = plans
        self.concurrency = concurrency
        self.acked = 0  # deliveries answered 2xx
        self.attempts = 0
        self.statuses: dict[int, int] = {}

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            sender = WebhookSender(session, self.url, SECRET)
            await asyncio.gather(*(self._workload(sender, w, plan)
                                   for w, plan in self.plans.items()))

    async def _workload(self, sender: WebhookSender, workload: str,
                        plan: list[dict[str, Any]]) -> None:
        queue = list(reversed(plan))

        async def worker() -> None:
            while queue:
                delivery = queue.pop()
                while True:
                    self.attempts += 1
                    try:
                        status = await sender.send(workload, delivery)
                    except (aiohttp.ClientError, TimeoutError):
                        status = 0
                    self.statuses[status] = self.statuses.get(status, 0) + 1
                    if 200 <= status < 300:
                        self.acked += 1
                        break
                    await asyncio.sleep(0.05)

        await asyncio.gather(*(worker() for _ in range(self.concurrency)))


async def _settled(url: str, logs: dict[str, list[dict[str, Any]]],
                   timeout: float = 30.0) -> dict[Any, float]:
    """The first scrape where every workload is applied through its last seq with nothing
    pending, or the last scrape read when that does not come within `timeout`."""
    deadline = time.monotonic() + timeout
    last: dict[Any, float] = {}
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            got = await scrape(url, s)
            if got is not None:
                last = got
                if all(value(got, "zaroz_events_last_seq", workload=w) == len(evs)
                       and value(got, "zaroz_events_pending", workload=w) == 0
                       for w, evs in logs.items()):
                    return got
            await asyncio.sleep(0.1)
    return last


async def test_sigkills_mid_webhook_stream_lose_nothing_and_count_nothing_twice(tmp_path: Path):
    logs, truth = finite_logs(seed=21, workloads=2, seconds=70, rate=0.5)
    rng = random.Random(28)
    plans = {w: delivery_plan(evs, rng=rng, duplicates=0.05, window=8)
             for w, evs in logs.items()}
    total = sum(len(p) for p in plans.values())
    assert total >= 1500
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    # Webhooks only: no route to backfill from, and no gap is given up within the test.
    serve = Serve("--webhook-secret-file", str(secret), "--state-dir", str(tmp_path / "state"),
                  "--checkpoint-interval", "1", "--webhook-gap-give-up", "3600")
    platform = Platform(serve.url, plans)
    scraper = Scraper(serve.url, 0.25)
    kills = sorted(rng.uniform(lo, hi) * total for lo, hi in ((0.1, 0.3), (0.4, 0.6), (0.7, 0.9)))
    try:
        await serve.start()
        scraper.start()
        sending = asyncio.create_task(platform.run())
        for at in kills:  # SIGKILL at random points of the stream, then a restart at once
            await until(lambda at=at: platform.acked >= at or sending.done(), timeout=120)
            assert not sending.done()
            await serve.kill()
            await serve.start()
        await asyncio.wait_for(sending, 180)
        final = await _settled(serve.url, logs)
    finally:
        await scraper.stop()
        await serve.kill()
    assert platform.acked == total
    assert platform.statuses.get(0, 0) > 0  # deliveries were cut by the kills and sent again
    for w, evs in logs.items():
        assert value(final, "zaroz_events_missing_total", workload=w) == 0, w
        assert value(final, "zaroz_events_pending", workload=w) == 0, w
        assert value(final, "zaroz_events_last_seq", workload=w) == len(evs), w
    # Every event counted exactly once: each counter and histogram equals the ground truth.
    assert assert_matches_truth(final, truth, list(logs), allow_duplicates=True) > 100


def serve_args(*extra: str) -> Any:
    return build_parser().parse_args(["serve", "--listen", "127.0.0.1:0", "--kube", "off",
                                      *extra])


class BlockedWrites:
    """Wraps the store's append of a batch: the first one waits for `release`, then fails as a
    full disk would (the store keeps what it took for the next write); later ones are
    written."""

    def __init__(self, write: Callable[..., Any]) -> None:
        self.write = write
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            self.release.wait(30)
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.write(*args)


async def test_no_2xx_while_the_checkpoint_write_is_blocked_and_503_when_it_fails(
        tmp_path: Path):
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    state = tmp_path / "state"
    args = ("--webhook-secret-file", str(secret), "--state-dir", str(state),
            "--checkpoint-interval", "0")
    running = await start(ServeConfig.from_args(serve_args(*args)))
    assert running.checkpointer is not None
    store = running.checkpointer.store
    blocked = BlockedWrites(store._append)
    store._append = blocked  # type: ignore[method-assign]
    events = Log()
    events.add("unit.created", unit="u1")
    events.add("unit.created", unit="u2")
    try:
        async with aiohttp.ClientSession() as s:
            sender = WebhookSender(s, running.url, SECRET)

            async def post(seq: int) -> tuple[int, Any, str | None]:
                body = orjson.dumps(events.events[seq - 1])
                async with s.post(sender.url, data=body,
                                  headers=sender.headers("wl-1", body)) as r:
                    return r.status, await r.json(), r.headers.get("Retry-After")

            first = asyncio.create_task(post(1))
            await until(lambda: blocked.entered.is_set() or first.done(), timeout=10)
            assert not first.done(), "answered before any checkpoint was written"
            second = asyncio.create_task(post(2))  # arrives while the first save is written
            await until(lambda: running.pipeline.logs["wl-1"].applied_through == 2, timeout=10)
            done, _ = await asyncio.wait({first, second}, timeout=0.5)
            assert not done  # nothing answered while the write is blocked
            blocked.release.set()
            status, body, retry_after = await first
            assert status == 503 and retry_after is not None
            assert body["error"]["code"] == "checkpoint_failed"
            # The second shares the next save, taken after the failure (it writes everything).
            assert (await second)[0] == 200
            # The platform redelivers the first: a duplicate, acknowledged once durable.
            status, body, _ = await post(1)
            assert (status, body) == (200, {"result": "duplicate"})
    finally:
        await running.stop()
    again = await start(ServeConfig.from_args(serve_args(*args)))
    try:
        async with aiohttp.ClientSession() as s:
            samples = await scrape(again.url, s)
    finally:
        await again.stop()
    assert samples is not None
    assert value(samples, "zaroz_events_last_seq", workload="wl-1") == 2
    assert value(samples, "zaroz_events_total", workload="wl-1", type="unit.created") == 2
    assert value(samples, "zaroz_webhook_deliveries_total", result="checkpoint_failed") == 1
    assert value(samples, "zaroz_webhook_deliveries_total", result="accepted") == 1
    assert value(samples, "zaroz_webhook_deliveries_total", result="duplicate") == 1
