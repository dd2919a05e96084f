"""One event valid per the contract with `occurred_at` in 2300 or 9999, through the real `serve`
process, by the events route and by a webhook: `/metrics` keeps answering 200, both count in
zaroz_events_invalid_total{reason="range"}, the checkpoint keeps moving, and a restart (SIGKILL)
on the same state dir continues from it."""

from __future__ import annotations

import copy
import time
from typing import Any

import aiohttp

from tests.serving import Serve
from tests.simlogs import finite_logs, parse, value
from tests.waiting import until
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer
from zaroz_sim.webhook import WebhookSender

LOGS, _ = finite_logs(seed=21, workloads=1, seconds=120)
(WL, CLEAN), = LOGS.items()
FAR = {10: "2300-01-01T00:00:00Z", 20: "9999-12-31T23:59:59.999999999Z"}  # by index


def _with_far_times() -> list[dict[str, Any]]:
    events = copy.deepcopy(CLEAN)
    for i, at in FAR.items():
        events[i]["occurred_at"] = at
    return events


EVENTS = _with_far_times()
HALF = len(EVENTS) // 2
assert max(FAR) < HALF and len(EVENTS) > 40


async def _scrape(session: aiohttp.ClientSession, url: str) -> tuple[int, dict]:
    async with session.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=10)) as r:
        text = await r.text()
        return r.status, (parse(text) if r.status == 200 else {})


async def _until_seq(session: aiohttp.ClientSession, url: str, seq: int) -> dict:
    """Scrapes until the workload's last seq is `seq`; every scrape must answer 200."""
    got: dict = {}

    async def reached() -> bool:
        nonlocal got
        status, got = await _scrape(session, url)
        assert status == 200, f"/metrics answered {status}"
        return value(got, "zaroz_events_last_seq", workload=WL) == seq

    deadline = time.monotonic() + 60
    while not await reached():
        assert time.monotonic() < deadline, value(got, "zaroz_events_last_seq", workload=WL)
        await until(lambda: True, 0.2)
    return got


async def _saves_move(session: aiohttp.ClientSession, url: str, serve: Serve) -> None:
    """The last successful save moves on (a scrape shows the one before its own), and the
    checkpoint task is alive: never restarted."""
    _, first = await _scrape(session, url)
    before = value(first, "zaroz_checkpoint_last_success_timestamp_seconds")
    deadline = time.monotonic() + 30
    while True:
        status, now = await _scrape(session, url)
        assert status == 200
        if value(now, "zaroz_checkpoint_last_success_timestamp_seconds") > before > 0:
            break
        assert time.monotonic() < deadline, "the checkpoint does not move"
        await until(lambda: True, 0.3)
    assert value(now, "zaroz_checkpoint_saves_total", result="error") == 0
    assert value(now, "zaroz_exporter_task_restarts_total", task="checkpoint") == 0


def _assert_counted(samples: dict) -> None:
    assert value(samples, "zaroz_events_invalid_total", workload=WL, reason="range") == 2
    assert value(samples, "zaroz_events_invalid_total", workload=WL, reason="schema") == 0


async def test_far_future_events_from_the_route_neither_stop_metrics_nor_checkpoints(
        tmp_path):
    route = RouteServer(SimConfig(workloads=1).workload_list())
    route.append(WL, EVENTS[:HALF])
    base = await route.start()
    args = ("--events-url", base, "--workload", WL, "--wait", "1", "--state-dir",
            str(tmp_path), "--checkpoint-interval", "0.2")
    serve = Serve(*args)
    try:
        await serve.start()
        async with aiohttp.ClientSession() as s:
            _assert_counted(await _until_seq(s, serve.url, HALF))
            await _saves_move(s, serve.url, serve)
            await serve.kill()
            await serve.start()  # the same state dir: it continues from its checkpoint
            status, restored = await _scrape(s, serve.url)
            assert status == 200
            assert value(restored, "zaroz_events_last_seq", workload=WL) == HALF
            _assert_counted(restored)
            route.append(WL, EVENTS[HALF:])
            _assert_counted(await _until_seq(s, serve.url, len(EVENTS)))
            await _saves_move(s, serve.url, serve)
    finally:
        await serve.kill()
        await route.stop()


async def test_far_future_events_by_webhook_neither_stop_metrics_nor_checkpoints(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    state = tmp_path / "state"
    serve = Serve("--webhook-secret-file", str(secret), "--state-dir", str(state),
                  "--checkpoint-interval", "0.2")
    try:
        await serve.start()
        async with aiohttp.ClientSession() as s:
            sender = WebhookSender(s, serve.url, "s3cret")
            statuses = [await sender.send(WL, ev) for ev in EVENTS[:HALF]]
            assert set(statuses) == {200}
            _assert_counted(await _until_seq(s, serve.url, HALF))
            await _saves_move(s, serve.url, serve)
            await serve.kill()
            await serve.start()
            status, restored = await _scrape(s, serve.url)
            assert status == 200
            assert value(restored, "zaroz_events_last_seq", workload=WL) == HALF
            _assert_counted(restored)
            statuses = [await sender.send(WL, ev) for ev in EVENTS[HALF:]]
            assert set(statuses) == {200}
            _assert_counted(await _until_seq(s, serve.url, len(EVENTS)))
            await _saves_move(s, serve.url, serve)
    finally:
        await serve.kill()
