"""The group commit (wiring/state/commits.py) over a checkpointer whose writes the test completes:
deliveries share saves, a save taken by a scrape covers them, and a failed save fails every
save written over the store it left behind."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from exporter.commands.config import ServeConfig
from exporter.commands.serve import start
from exporter.wiring.events import Pipeline
from exporter.wiring.state.checkpoint import Checkpointer, CheckpointError
from exporter.wiring.state.commits import GroupCommit
from tests.test_webhook_durability import BlockedWrites, serve_args
from tests.waiting import until


class Writes:
    """A checkpointer whose saves stay in flight until the test ends each one."""

    def __init__(self) -> None:
        self.pending: list[tuple[Callable[[], None], list[bool | None]]] = []
        self.refuse = False  # the next save cannot even be taken

    def begin_write(self, on_done: Callable[[], None]) -> Callable[[], bool]:
        if self.refuse:
            self.refuse = False
            raise CheckpointError("state dir is in use by another exporter")
        ended: list[bool | None] = [None]
        self.pending.append((on_done, ended))

        def finish() -> bool:
            if not ended[0]:
                raise CheckpointError("database or disk is full")
            return True

        return finish

    def save(self) -> bool:
        return True

    async def take_ahead(self) -> None:
        pass

    def failed(self, e: BaseException) -> CheckpointError:
        return CheckpointError(str(e))

    def end(self, i: int, error: bool = False) -> None:
        on_done, ended = self.pending[i]
        ended[0] = not error
        on_done()


def _commits() -> tuple[GroupCommit, Writes]:
    writes = Writes()
    return GroupCommit(writes), writes  # type: ignore[arg-type]


async def _spin() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_deliveries_arriving_while_a_save_is_written_share_the_next():
    commits, writes = _commits()
    first = [asyncio.create_task(commits.covered()) for _ in range(3)]
    await until(lambda: len(writes.pending) == 1)  # one save for the three
    later = [asyncio.create_task(commits.covered()) for _ in range(20)]
    await _spin()
    assert len(writes.pending) == 1  # in flight: the twenty wait for it to be written
    writes.end(0)
    assert await asyncio.gather(*first) == [True] * 3
    await until(lambda: len(writes.pending) == 2)  # then one save for the twenty
    assert not any(t.done() for t in later)  # the first save did not cover them
    writes.end(1)
    assert await asyncio.gather(*later) == [True] * 20
    assert commits.begun == 2


async def test_a_scrape_save_taken_after_the_delivery_covers_it():
    commits, writes = _commits()
    waiting = asyncio.create_task(commits.covered())
    await asyncio.sleep(0)  # the delivery waits; its save would be begun at the next pass
    scrape = commits.begin_save()  # a scrape takes a save first
    await _spin()
    assert len(writes.pending) == 1 and commits.begun == 0  # no second save
    writes.end(0)
    assert await scrape() is True
    assert await waiting is True


async def test_a_save_in_flight_before_the_delivery_does_not_cover_it():
    commits, writes = _commits()
    scrape = commits.begin_save()
    waiting = asyncio.create_task(commits.covered())
    await _spin()
    assert len(writes.pending) == 1
    writes.end(0)
    await scrape()
    await until(lambda: len(writes.pending) == 2)
    assert not waiting.done()
    writes.end(1)
    assert await waiting is True


async def test_a_failed_save_fails_those_taken_before_it_was_seen():
    commits, writes = _commits()
    a = asyncio.create_task(commits.covered())
    await until(lambda: len(writes.pending) == 1)
    scrape_b = commits.begin_save()  # taken while save 1 is written: incremental over it
    b = asyncio.create_task(commits.covered())
    await _spin()
    writes.end(0, error=True)
    writes.end(1)
    assert await a is False
    try:  # written over the store save 1 left: the scrape must not expose what it covers
        await scrape_b()
        raise AssertionError("the scrape's save was taken as durable")
    except CheckpointError:
        pass
    # b arrived after save 2 was taken: a third save (written whole after the failure).
    await until(lambda: len(writes.pending) == 3)
    writes.end(2)
    assert await b is True


async def test_a_delivery_covered_by_a_save_written_over_a_failed_one_is_not_acknowledged():
    commits, writes = _commits()
    scrape_a = commits.begin_save()
    b = asyncio.create_task(commits.covered())
    await asyncio.sleep(0)
    scrape_b = commits.begin_save()  # covers b, but is taken before save 1 fails
    writes.end(1)  # written in its turn, over a store without save 1's changes
    writes.end(0, error=True)
    results: list[Any] = await asyncio.gather(scrape_a(), scrape_b(), return_exceptions=True)
    assert isinstance(results[0], CheckpointError) and isinstance(results[1], CheckpointError)
    assert await b is False


async def test_a_save_written_before_a_failed_one_still_acknowledges_its_deliveries():
    commits, writes = _commits()
    a = asyncio.create_task(commits.covered())
    await until(lambda: len(writes.pending) == 1)
    b = asyncio.create_task(commits.covered())
    await asyncio.sleep(0)
    scrape = commits.begin_save()  # covers b; the failure of it is seen before save 1's end
    writes.end(1, error=True)
    await _spin()
    writes.end(0)
    assert await a is True
    assert await b is False
    await asyncio.gather(scrape(), return_exceptions=True)


async def test_a_save_taken_after_a_failure_to_take_one_is_durable():
    commits, writes = _commits()
    writes.refuse = True
    try:
        commits.begin_save()
        raise AssertionError("taken")
    except CheckpointError:
        pass
    scrape = commits.begin_save()  # taken once the failure was seen: written whole
    waiting = asyncio.create_task(commits.covered())
    await _spin()
    writes.end(0)
    assert await scrape() is True
    await until(lambda: len(writes.pending) == 2)
    writes.end(1)
    assert await waiting is True


async def test_a_waiting_scrape_resumes_one_hop_after_its_write_ends(tmp_path: Path):
    """From the writer thread's end of a save to the scrape's resumption, the loop runs the
    group commit's one callback and the scrape's own wakeup: no task, shield or future in
    between, each of which would queue it behind whatever else waits on the loop."""
    p = Pipeline()
    p.workload("wl-1").offer({"seq": 1, "type": "unit.created", "unit": "u-1"}, "route")
    cp = Checkpointer(tmp_path, p)
    commits = GroupCommit(cp)
    loop = asyncio.get_running_loop()
    hops: list[str] = []
    ended = [False]
    write = cp._write

    def ending(ch: Any) -> tuple[int, int]:
        try:
            return write(ch)
        finally:
            ended[0] = True  # in the writer thread, before its completion is announced

    def counted(name: str, schedule: Callable[..., asyncio.Handle]) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> asyncio.Handle:
            if ended[0]:
                hops.append(name)
            return schedule(*args, **kw)
        return call

    cp._write = ending  # type: ignore[method-assign]
    loop.call_soon = counted("call_soon", loop.call_soon)  # type: ignore[method-assign]
    loop.call_soon_threadsafe = counted(  # type: ignore[method-assign]
        "call_soon_threadsafe", loop.call_soon_threadsafe)
    try:
        durable = commits.begin_save()  # a scrape's save, then its wait
        assert await durable() is True
        resumed = list(hops)
    finally:
        del loop.call_soon, loop.call_soon_threadsafe
        cp.close()
    assert resumed == ["call_soon_threadsafe", "call_soon"], resumed


async def test_a_page_queued_when_a_write_ends_waits_for_the_scrape_it_settles():
    commits, writes = _commits()
    order: list[str] = []
    arrived: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def scrape() -> None:
        await commits.begin_save()()
        order.append("scrape")

    async def page() -> None:
        await arrived  # a tailer's response, read before the write's end reaches the loop
        ahead = commits.gate()
        if ahead is not None:
            await ahead
        order.append("page")

    tasks = [asyncio.create_task(scrape()), asyncio.create_task(page())]
    await until(lambda: len(writes.pending) == 1)
    assert commits.gate() is None  # no write ended: pages go on
    arrived.set_result(None)  # the page's turn is queued first,
    writes.end(0)  # then the writer's completion
    await asyncio.gather(*tasks)
    assert order == ["scrape", "page"]
    assert commits.gate() is None


async def test_a_scrape_whose_save_is_queued_behind_a_failing_one_is_refused(tmp_path: Path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    running = await start(ServeConfig.from_args(serve_args(
        "--webhook-secret-file", str(secret), "--state-dir", str(tmp_path / "state"),
        "--checkpoint-interval", "0")))
    assert running.checkpointer is not None and running.commits is not None
    commits = running.commits
    store = running.checkpointer.store
    blocked = BlockedWrites(store.write)
    store.write = blocked  # type: ignore[method-assign]
    try:
        async with aiohttp.ClientSession() as s:
            async def scrape() -> int:
                async with s.get(running.url + "/metrics") as r:
                    await r.read()
                    return r.status

            first = asyncio.create_task(scrape())
            await until(blocked.entered.is_set, timeout=10)
            second = asyncio.create_task(scrape())  # its save is queued behind the first's
            await until(lambda: commits.taken == 2, timeout=10)
            blocked.release.set()
            assert await first == 503
            # Written, but over a store without the first save's changes: not exposed.
            assert await second == 503
            assert await scrape() == 200  # the next save is written whole
            async with s.get(running.url + "/metrics") as r:  # where its time went
                steps = [p.strip().split(";")[0] for p in r.headers["Server-Timing"].split(",")]
            assert steps == ["prime", "take", "render", "write", "hop", "resume"]
    finally:
        await running.stop()
