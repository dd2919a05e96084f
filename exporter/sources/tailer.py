"""Tailing each workload's event log from the events route, one asyncio task per workload.

The cursor is the model's (`WorkloadLog.cursor`): its `applied_through`, or past a seq beyond what
the model holds that the route gave (any integer, kept exactly); the tailer keeps no position of
its own, so whatever the model applied, counted invalid or gave up is never asked for again, and
whatever it did not is. Wall-clock reads (last success time) happen here, never in the model.

Nothing but cancellation ends a tailer: every error is counted, logged (rate-limited) and retried
after a pause, because a route that is down, a token being fixed or a workload not created yet
all heal on their own.

Pacing (`poll_interval`): at 1,000 workloads each long poll returns after about one event, so
every event costs a whole request in the exporter and in the route. A caught-up tailer whose
page was short therefore starts its next request no sooner than `poll_interval` seconds after
the last one started, and that request collects what arrived meanwhile in one page. This is
latency added on purpose (an event is applied up to `poll_interval` later), never applied to a
backfill (fetch_now() cuts the pause short), to a tailer that is behind (a full page, or a head
ahead of what was applied: asked again at once) nor to shutdown (the pause is cancelled).

Catching up (`catch_up`): until a tailer first catches up, each of its requests takes one of
a bounded number of slots the supervisor shares among its tailers (`CATCH_UP_REQUESTS`). After a
restart 1,000 tailers would otherwise open 1,000 connections to the route at once: more than a
listen backlog holds (aiohttp's 128), so the route's kernel drops the rest and their clients
send their SYN again a whole second later, or a slow route times them all out together. In
slots, each first page is answered at once and the next tailer's goes. Readiness is unchanged:
every tailer still has to catch up. Long polls and backfills of a tailer that caught up take no
slot (a long poll would hold one for its whole wait).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from exporter.model.ranges import SEQ_MAX
from exporter.model.workload import WorkloadLog
from exporter.sources.backoff import Backoff
from exporter.sources.complaints import Complaints
from exporter.sources.http import HttpError, Retry, Wording, retry_forever
from exporter.sources.ports import RouteRecorder, WorkloadLogs
from exporter.sources.route import CursorExpired, RouteClient
from exporter.sources.tasks import cancel

log = logging.getLogger(__name__)

# Requests in flight at once of tailers that have not caught up yet (per supervisor).
CATCH_UP_REQUESTS = 32

SOURCE = "route"  # the model's name for what the tailer offers (its ranges give the cursor)
Sleep = Callable[[float], Awaitable[Any]]
T = TypeVar("T")

WORDING = Wording(
    retry_later="events route asks to retry later",
    failed="events route request failed",
    unauthorized="events route refused the token",
    no_credentials="no token to send: check the token file",
    not_found="events route does not know the workload",
    rejected="events route rejected the request",
    recovered="events route recovered",
)


def _page_seqs(events: Iterable[Any]) -> list[int]:
    """Integer seqs on a page, as the model reads them (bools, seq < 1 and seqs beyond what
    the model holds, model/ranges.py, are no seq: the model counts them invalid)."""
    out = []
    for ev in events:
        s = ev.get("seq") if type(ev) is dict else None
        if type(s) is int and 1 <= s <= SEQ_MAX:
            out.append(s)
    return out


class Tailer:
    """Long-polls one workload's events into its WorkloadLog."""

    def __init__(
        self,
        client: RouteClient,
        workload: str,
        log: WorkloadLog,
        metrics: RouteRecorder,
        *,
        limit: int = 1000,
        wait: float = 30,
        backoff: Backoff | None = None,
        attention_delay: float = 30.0,
        idle_delay: float = 1.0,
        poll_interval: float = 0.0,
        log_interval: float = 60.0,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        start_cursor: Callable[[], Awaitable[int]] | None = None,
        gate: Callable[[], Awaitable[None] | None] | None = None,
        catch_up: asyncio.Semaphore | None = None,
    ) -> None:
        """`gate`: asked before each page is applied; an awaitable it returns is awaited first
        (the group commit lets a scrape whose checkpoint was just written resume ahead of the
        pages queued on the loop). `catch_up`: the slots every request (and the start cursor's)
        takes until the tailer first catches up."""
        self.client = client
        self.workload = workload
        self.log = log
        self.metrics = metrics
        self.limit = limit
        self.wait = wait
        self.backoff = backoff if backoff is not None else Backoff()
        self.idle_delay = idle_delay  # pause after an empty page that came back early
        # Least seconds between the starts of a caught-up tailer's requests (0: no pacing).
        self.poll_interval = poll_interval
        self.sleep = sleep
        self.clock = clock
        self.monotonic = monotonic
        self.head_seq: int | None = None
        self.start_head: int | None = None  # the route's head at the first page: the backlog
        self.caught_up = False
        self.last_success: float | None = None
        # Errors a person has to fix (a token, a 4xx, a workload the route does not know) wait at
        # least `attention_delay` (the route may learn the workload later: still retried).
        self.retry = Retry(logging.getLogger(__name__), WORDING, self.backoff,
                           attention_delay=attention_delay, log_interval=log_interval,
                           workload=workload)
        self._warned_behind = False
        self._task: asyncio.Task[None] | None = None
        # Where to start when the log is fresh (--start-from head): asked once, before polling.
        self.start_cursor = start_cursor
        # fetch_now(): the next request goes at once and without waiting (a backfill).
        self._urgent = False
        # The long poll or pause fetch_now() may cut short (a task of its own), if one runs.
        self._cuttable: asyncio.Future[Any] | None = None
        self.gate = gate
        self.catch_up = catch_up

    @property
    def cursor(self) -> int:
        """The seq the next request asks for events after."""
        return self.log.cursor(SOURCE)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self.metrics.start(self.workload)
            self.metrics.caught_up(self.workload, self.caught_up)
            self._task = asyncio.create_task(self.run(), name=f"tail:{self.workload}")
        return self._task

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel(task)

    def fetch_now(self) -> None:
        """Ask for a request at once, with wait=0: events the intake waits for (a gap among
        webhook deliveries, a ping ahead of the cursor) are backfilled from the route.

        Cuts short an idle or paced pause or a long poll in flight; a pause after a failure
        (backoff, Retry-After) is kept, so a backfill never hammers a route that is refusing
        requests.
        """
        self._urgent = True
        cuttable = self._cuttable
        if cuttable is not None:
            cuttable.cancel()  # _cut_short() tells this cancellation from a stop

    async def _pause(self, delay: float) -> None:
        if self.retry.failing:
            await self.sleep(delay)
            return
        if not self._urgent:
            await self._cut_short(self.sleep(delay))

    async def _cut_short(self, step: Awaitable[T]) -> T | None:
        """`step`'s result, or None when fetch_now() cancelled it.

        fetch_now() cancels the step's own task: no waiter task nor asyncio.wait per request or
        pause (at 1,000 workloads each costs a share of every event)."""
        task: asyncio.Future[T] = asyncio.ensure_future(step)
        self._cuttable = task
        try:
            return await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if (me is not None and me.cancelling()) or not task.cancelled():
                raise  # the tailer itself is being stopped
            return None
        finally:
            self._cuttable = None
            if not task.done():
                task.cancel()

    async def _start_at_cursor(self, start_cursor: Callable[[], Awaitable[int]]) -> None:
        """Resolve the start cursor (retried until it succeeds) and move a fresh log there."""
        while True:
            try:
                cursor = await self._in_slot(start_cursor())
                break
            except asyncio.CancelledError:
                raise
            except Exception as e:
                delay = self.backoff.next()
                self.retry.complain(logging.WARNING, getattr(e, "result", "error"),
                                    "cannot resolve the start cursor", delay, error=str(e))
                await self.sleep(delay)
        self.backoff.reset()
        wl = self.log
        if wl.applied_through == 0:
            # Webhook deliveries may already wait in the log: those at or before the start are
            # skipped, like everything else before it.
            wl.skip_to(cursor)
            log.info("starting at the route's head", extra={
                "workload": self.workload, "cursor": cursor})

    async def run(self) -> None:
        start_cursor, self.start_cursor = self.start_cursor, None
        if start_cursor is not None:
            await self._start_at_cursor(start_cursor)
        log.info("tailing workload", extra={
            "workload": self.workload, "cursor": self.cursor})
        await retry_forever(self.poll, self._pause, self.backoff, log, "tailer error, retrying",
                            lambda: {"workload": self.workload,
                                     "cursor": self.cursor})

    # -- one request -------------------------------------------------------------------------

    async def poll(self) -> float:
        """One request and its effects; returns the pause before the next one."""
        w = self.workload
        after = self.cursor
        urgent, self._urgent = self._urgent, False
        # Until caught up, ask without waiting: a log with nothing after the cursor then answers at
        # once, so readiness does not lag a whole long poll behind at startup.
        wait = self.wait if self.caught_up and not urgent else 0
        started = self.monotonic()
        try:
            if wait > 0:
                got = await self._cut_short(self.client.events(w, after, self.limit, wait))
                if got is None:
                    return 0.0  # fetch_now(): ask again at once, without waiting
                page = got
            else:
                page = await self._in_slot(self.client.events(w, after, self.limit, wait))
        except CursorExpired as e:
            self._count(e.result)
            return self._expired(after, e.oldest_seq)
        except HttpError as e:  # every kind is counted and retried, each at its own pace
            self._count(e.result)
            return self.retry.failed(e, cursor=after)
        self._count(page.result)
        took = self.monotonic() - started
        if self.gate is not None:
            ahead = self.gate()
            if ahead is not None:
                await ahead
        delay = self._apply(after, page.events, page.head_seq, took < wait / 2)
        if (self.poll_interval > took and len(page.events) < self.limit
                and self.cursor >= page.head_seq):
            # Caught up, short page: let the next page gather what arrives meanwhile.
            return max(delay, self.poll_interval - took)
        return delay

    async def _in_slot(self, step: Awaitable[T]) -> T:
        """`step`, in a catch-up slot while the tailer has not caught up."""
        slots = self.catch_up
        if slots is None or self.caught_up:
            return await step
        async with slots:
            return await step

    def _count(self, result: str) -> None:
        self.metrics.request(self.workload, result)

    def _succeeded(self, healthy: bool = True) -> None:
        self.last_success = self.clock()
        self.metrics.success(self.workload, self.last_success)
        if healthy:
            self.retry.recovered(cursor=self.cursor)

    def _apply(self, after: int, events: list[Any], head: int, early: bool) -> float:
        w, wl = self.workload, self.log
        self._succeeded(healthy=bool(events) or head <= after)
        self.head_seq = head
        if self.start_head is None:
            self.start_head = head
        self.metrics.head(w, head)
        for obj in events:
            wl.offer(obj, SOURCE)
        seqs = _page_seqs(events)
        if seqs:
            # Whatever the page skipped (or did not start with) is lost upstream: the model counts
            # the gap and applies what waited behind it, so the cursor moves past the page.
            wl.give_up(max(seqs))
            if seqs[0] != after + 1 or len(seqs) != seqs[-1] - seqs[0] + 1:
                log.warning("events route page skipped seqs", extra={
                    "workload": w, "cursor": after, "first_seq": seqs[0], "last_seq": max(seqs),
                    "events": len(events)})
        if self.cursor >= head and not self.caught_up:
            self.caught_up = True
            self.metrics.caught_up(w, True)
            log.info("caught up with the events route", extra={
                "workload": w, "cursor": self.cursor, "head_seq": head})
        if head < after and not self._warned_behind:
            # The model's seqs only grow: a log that restarted from 1 is not followed (yet).
            self._warned_behind = True
            log.warning("events route head is behind the cursor; was the log reset?", extra={
                "workload": w, "cursor": after, "head_seq": head})
        if events:
            return 0.0
        if head > after:
            # The log holds newer events but the page is empty: the route misbehaves. Retrying at
            # once would spin; the stall shows as head_seq ahead of the applied seq.
            delay = self.backoff.next()
            self.retry.complain(logging.WARNING, "empty_page", "events route returned an empty "
                                "page behind its head", delay, cursor=after, head_seq=head)
            return delay
        # Nothing new. A long poll that came back early (a route ignoring `wait`) would spin.
        return self.idle_delay if early else 0.0

    def _expired(self, after: int, oldest_seq: int) -> float:
        w = self.workload
        self.metrics.cursor_expired(w)
        if oldest_seq - 1 > after:
            self._succeeded()
            self.log.pass_to(SOURCE, oldest_seq - 1)
            log.warning("events route cursor expired, events lost", extra={
                "workload": w, "cursor": after, "oldest_seq": oldest_seq,
                "missing": oldest_seq - 1 - after})
            return 0.0
        # 410 although the cursor is inside what the route retains: retrying at once would spin.
        delay = self.backoff.next()
        self.retry.complain(logging.WARNING, "410", "events route expired a retained cursor",
                            delay, cursor=after, oldest_seq=oldest_seq)
        return delay


class TailSupervisor:
    """Runs one Tailer per workload: the given ones, or those the route lists (re-listed every
    `discovery_interval` seconds, starting and stopping tailers to match)."""

    def __init__(
        self,
        client: RouteClient,
        pipeline: WorkloadLogs,
        metrics: RouteRecorder,
        workloads: list[str] | None = None,
        discovery_interval: float = 60.0,
        *,
        backoff_factory: Callable[[], Backoff] = Backoff,
        log_interval: float = 60.0,
        start_cursor: Callable[[str], Awaitable[int]] | None = None,
        owns: Callable[[str], bool] | None = None,
        catch_up_requests: int = CATCH_UP_REQUESTS,
        **tailer_options: Any,
    ) -> None:
        """`catch_up_requests`: how many requests of tailers not caught up yet are in flight at
        once (0: no bound)."""
        self.client = client
        self.owns = owns or (lambda _: True)  # this shard's workloads (exporter.model.sharding)
        self.pipeline = pipeline
        self.metrics = metrics
        self.fixed = list(dict.fromkeys(workloads)) if workloads else None
        self.discovery_interval = discovery_interval
        self.backoff_factory = backoff_factory
        self.tailer_options = tailer_options
        self.catch_up = asyncio.Semaphore(catch_up_requests) if catch_up_requests > 0 else None
        self.tailers: dict[str, Tailer] = {}
        self.discovered = False  # a workload list is known: given (at start) or listed once
        self._discovery_task: asyncio.Task[None] | None = None
        # Start cursor of workloads of the first sync that have no log yet (--start-from head).
        # Workloads that appear later are new: they start at the beginning of their log.
        self.start_cursor = start_cursor
        self._synced = False
        self._complaints = Complaints(logging.getLogger(__name__), "events route recovered",
                                      log_interval)

    def add(self, workload: str) -> bool:
        """Tail `workload` now, without waiting for the next discovery (a signed webhook delivery
        named it). Only in discovery mode: a fixed --workload list is the operator's choice.
        Returns whether a tailer runs for it."""
        if workload in self.tailers:
            return True
        if self.fixed is not None or not self.owns(workload):
            return False
        self._new_tailer(workload)
        self.metrics.workloads(len(self.tailers))
        log.info("tailing a workload named by a webhook delivery", extra={"workload": workload})
        return True

    def _new_tailer(self, w: str) -> Tailer:
        start_cursor = None
        if self.start_cursor is not None and not self._synced and w not in self.pipeline.logs:
            start_cursor = functools.partial(self.start_cursor, w)
        t = self.tailers[w] = Tailer(
            self.client, w, self.pipeline.workload(w), self.metrics,
            backoff=self.backoff_factory(), start_cursor=start_cursor, catch_up=self.catch_up,
            **self.tailer_options,
        )
        t.start()
        return t

    async def start(self) -> None:
        if self.fixed is not None:
            self.discovered = True
            await self._sync(self.fixed)
        elif self._discovery_task is None:
            self._discovery_task = asyncio.create_task(self._discover_loop(), name="tail:discovery")

    async def stop(self) -> None:
        task, self._discovery_task = self._discovery_task, None
        await cancel(task)
        # The tailers stay listed: the last checkpoint still asks which logs are held.
        await asyncio.gather(*(t.stop() for t in self.tailers.values()))

    def ready(self) -> bool:
        """Discovery succeeded once (or workloads were given) and every tailer caught up."""
        return self.discovered and all(t.caught_up for t in self.tailers.values())

    def readiness(self) -> tuple[bool, str]:
        """For the server's /readyz: the verdict and why."""
        if not self.discovered:
            if self.fixed is not None:
                return False, "tailers not started"
            return False, "workload discovery has not succeeded yet"
        behind = sorted(w for w, t in self.tailers.items() if not t.caught_up)
        if behind:
            return False, f"{len(behind)} of {len(self.tailers)} workloads not caught up: " + (
                ", ".join(behind[:5]) + (", ..." if len(behind) > 5 else ""))
        n = len(self.tailers)
        return True, f"{n} workload{'' if n == 1 else 's'} caught up"

    async def discover_once(self) -> bool:
        """List the route's workloads and match the tailers to them; False when listing failed."""
        try:
            refs = await self.client.workloads()
        except HttpError as e:
            self.metrics.discovery("error")
            self._complaints.failed(logging.WARNING, e.result, "workload discovery failed",
                                    0.0, error=str(e))
            return False
        self.metrics.discovery("ok")
        self._complaints.recovered()
        self.discovered = True
        await self._sync([r.id for r in refs])
        return True

    async def _discover_loop(self) -> None:
        backoff = self.backoff_factory()

        async def step() -> float:
            try:
                ok = await self.discover_once()
            except Exception:
                self.metrics.discovery("error")  # a bug: logged (with its traceback) below
                raise
            if ok:
                backoff.reset()
                return self.discovery_interval
            return min(self.discovery_interval, backoff.next())

        await retry_forever(step, asyncio.sleep, backoff, log, "workload discovery error", dict)

    async def _sync(self, wanted: list[str]) -> None:
        wanted = [w for w in wanted if self.owns(w)]
        want = set(wanted)
        gone = [self.tailers.pop(w) for w in list(self.tailers) if w not in want]
        for w in wanted:
            if w not in self.tailers:
                self._new_tailer(w)
        self._synced = True
        self.metrics.workloads(len(self.tailers))
        for t in gone:
            # Stopping drops nothing: the WorkloadLog stays in the pipeline with its cursor, so a
            # workload that comes back resumes where it left off.
            await t.stop()
            self.metrics.forget(t.workload)
            log.info("workload left the route, tailer stopped", extra={"workload": t.workload})
