"""Pacing of caught-up tailers (--poll-interval) and what cuts a pause or a long poll short.

A scripted route client and the Tailer's injectable clock and sleep: time moves only when a
request "takes" time or the tailer sleeps, so nothing here depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.route import RouteMetrics
from exporter.sources.route import Page
from exporter.sources.tailer import Tailer
from exporter.wiring.events import Pipeline
from tests.envelopes import Log
from tests.waiting import until


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def events(first: int, last: int) -> list[dict[str, Any]]:
    """Valid envelopes with seqs first..last (unit.created of distinct units)."""
    log = Log()
    for i in range(1, last + 1):
        log.add("unit.created", unit=f"u{i}", at_ms=i)
    return log.events[first - 1:last]


class Scripted:
    """Answers each request with the next page, `took` seconds of the clock later; with no page
    left (or a None) the request hangs until it is cancelled."""

    def __init__(self, clock: Clock, pages: list[Page | None], took: float = 0.25) -> None:
        self.clock = clock
        self.pages = pages
        self.took = took
        self.calls: list[tuple[int, float, float]] = []  # (after, wait, started at)
        self.cancelled = 0

    async def events(self, workload: str, after: int, limit: int, wait: float) -> Page:
        self.calls.append((after, wait, self.clock.now))
        page = self.pages.pop(0) if self.pages else None
        if page is None:
            try:
                await asyncio.get_running_loop().create_future()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        self.clock.now += self.took
        assert page is not None
        return page


def tailer(client: Scripted, clock: Clock, *, limit: int = 10, poll_interval: float = 2.0,
           sleep: Any = None) -> Tailer:
    registry = Registry()
    return Tailer(client, "wl-1", Pipeline(registry).workload("wl-1"),  # type: ignore[arg-type]
                  RouteMetrics(registry), limit=limit, wait=30, poll_interval=poll_interval,
                  idle_delay=0.0, monotonic=clock, **({"sleep": sleep} if sleep else {}))


async def test_a_caught_up_tailer_waits_out_the_interval_after_a_short_page():
    clock = Clock()
    client = Scripted(clock, [Page(events(1, 3), 3), Page(events(4, 4), 4)], took=0.25)
    t = tailer(client, clock)
    assert await t.poll() == 2.0 - 0.25  # caught up on a short page: the rest of the interval
    assert t.caught_up and t.log.applied_through == 3
    client.took = 0.5
    assert await t.poll() == 2.0 - 0.5  # a long poll answered after one event: the same
    assert t.log.applied_through == 4


async def test_no_pause_once_the_request_took_the_whole_interval():
    clock = Clock()
    client = Scripted(clock, [Page(events(1, 1), 1)], took=2.0)
    assert await tailer(client, clock, poll_interval=2.0).poll() == 0.0


async def test_a_full_page_is_followed_at_once_even_when_it_reaches_the_head():
    clock = Clock()
    client = Scripted(clock, [Page(events(1, 10), 10), Page(events(11, 19), 19)])
    t = tailer(client, clock, limit=10)
    assert await t.poll() == 0.0  # full page: more may be there, ask again at once
    assert t.caught_up
    assert await t.poll() == 2.0 - 0.25  # then a short one: paced


async def test_a_tailer_behind_the_head_is_not_paced():
    clock = Clock()
    # A route that caps pages below the limit: short pages, but the head is ahead.
    client = Scripted(clock, [Page(events(1, 4), 9), Page(events(5, 9), 9)])
    t = tailer(client, clock, limit=10)
    assert await t.poll() == 0.0
    assert not t.caught_up
    assert await t.poll() == 2.0 - 0.25  # now caught up


async def test_zero_interval_is_the_unpaced_long_poll():
    clock = Clock()
    client = Scripted(clock, [Page(events(1, 3), 3), Page(events(4, 4), 4)])
    t = tailer(client, clock, poll_interval=0.0)
    assert [await t.poll(), await t.poll()] == [0.0, 0.0]


async def test_running_tailer_starts_caught_up_requests_one_interval_apart():
    clock = Clock()
    pages: list[Page | None] = [Page(events(1, 3), 3), *(Page(events(s, s), s)
                                                          for s in range(4, 9))]
    client = Scripted(clock, pages, took=0.3)
    slept: list[float] = []

    async def sleep(d: float) -> None:
        slept.append(d)
        clock.now += d
        await asyncio.sleep(0)

    t = tailer(client, clock, sleep=sleep)
    t.start()
    await until(lambda: len(client.calls) == 7)  # the 7th hangs: nothing left to answer
    starts = [c[2] for c in client.calls]
    assert [round(b - a, 9) for a, b in itertools.pairwise(starts)] == [2.0] * 6
    assert [c[1] for c in client.calls] == [0, *[30] * 6]  # long polls once caught up
    assert t.log.applied_through == 8
    await asyncio.wait_for(t.stop(), 5)


async def test_fetch_now_cuts_the_pause_short_and_asks_without_waiting():
    clock = Clock()
    client = Scripted(clock, [Page(events(1, 3), 3), Page(events(4, 5), 5)])
    pausing = asyncio.Event()

    async def sleep(d: float) -> None:  # a pause that never ends by itself
        pausing.set()
        await asyncio.get_running_loop().create_future()

    t = tailer(client, clock, poll_interval=60.0, sleep=sleep)
    t.start()
    await pausing.wait()
    assert len(client.calls) == 1
    t.fetch_now()
    await until(lambda: len(client.calls) == 2)
    assert client.calls[1][:2] == (3, 0)  # at once, and without waiting: a backfill
    await until(lambda: t.log.applied_through == 5)
    await asyncio.wait_for(t.stop(), 5)


async def test_stop_interrupts_the_pause():
    clock = Clock()
    client = Scripted(clock, [Page(events(1, 3), 3)])
    pausing = asyncio.Event()

    async def sleep(d: float) -> None:
        pausing.set()
        await asyncio.get_running_loop().create_future()

    t = tailer(client, clock, poll_interval=60.0, sleep=sleep)
    task = t.start()
    await pausing.wait()
    await asyncio.wait_for(t.stop(), 5)
    assert task.cancelled()
    assert len(client.calls) == 1


async def test_fetch_now_cancels_a_long_poll_in_flight_and_asks_again_at_once():
    clock = Clock()
    client = Scripted(clock, [Page(events(1, 3), 3), None, Page(events(4, 4), 4)])
    t = tailer(client, clock, poll_interval=0.0)
    t.start()
    await until(lambda: len(client.calls) == 2)  # a long poll, hanging
    assert client.calls[1][:2] == (3, 30)
    t.fetch_now()
    await until(lambda: len(client.calls) >= 3)  # then a long poll again, hanging
    assert client.cancelled == 1
    assert client.calls[2][:2] == (3, 0)
    await until(lambda: t.log.applied_through == 4)
    task = t._task
    await asyncio.wait_for(t.stop(), 5)
    assert task is not None and task.cancelled()


async def test_stop_cancels_a_long_poll_in_flight():
    clock = Clock()
    client = Scripted(clock, [Page(events(1, 3), 3)])
    t = tailer(client, clock, poll_interval=0.0)
    task = t.start()
    await until(lambda: len(client.calls) == 2)
    await asyncio.wait_for(t.stop(), 5)
    assert task.cancelled() and client.cancelled == 1
    assert len(client.calls) == 2  # stopped, not taken for a fetch_now and retried


async def test_fetch_now_during_a_request_that_cannot_be_cut_skips_the_next_pause():
    clock = Clock()
    client = Scripted(clock, [Page(events(1, 3), 3), Page(events(4, 4), 4)])
    slept: list[float] = []

    async def sleep(d: float) -> None:  # a pause that never ends by itself
        slept.append(d)
        await asyncio.get_running_loop().create_future()

    t = tailer(client, clock, poll_interval=60.0, sleep=sleep)
    events_of = client.events

    async def backfill_asked_meanwhile(*a: Any) -> Page:
        if len(client.calls) == 0:
            t.fetch_now()  # during the first request (wait=0: nothing to cancel)
        return await events_of(*a)

    client.events = backfill_asked_meanwhile  # type: ignore[method-assign]
    t.start()
    await until(lambda: slept)  # paused after the second page, not after the first
    assert [c[:2] for c in client.calls] == [(0, 0), (3, 0)]  # asked again at once, no wait
    assert slept == [60.0 - 0.25] and t.log.applied_through == 4
    await asyncio.wait_for(t.stop(), 5)
