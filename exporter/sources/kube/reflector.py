"""Keeping a handler in step with the API server: LIST once, then WATCH from where the list was.

Informer semantics on a plain aiohttp loop (the official clients' watch helpers were ~5x slower,
decoded custom objects twice and retried a 410 with the same stale resourceVersion):

- a paginated LIST gives the whole set and a resourceVersion; the handler gets it page by page
  (`list_page`), then the keys of the whole set (`list_done`);
- a WATCH from that resourceVersion (with bookmarks) gives every change after it; every event and
  bookmark advances the resourceVersion, so a watch that ends, drops or times out is resumed
  from the last one seen and replays nothing (no ADDED storm, no relist);
- only a 410 (the resourceVersion was compacted away) or a watch refused outright forces a new
  LIST, and `list_done` lets the handler drop what was deleted meanwhile;
- a watch is never opened without a resourceVersion (that would replay every object as ADDED);
- where the API server offers it, the whole set comes instead from a streaming list (client-go's
  watch-list, `--kube-watch-list`): one WATCH with `sendInitialEvents=true`, whose synthetic
  ADDED events are handed over as a LIST's pages are; the bookmark annotated
  `k8s.io/initial-events-end` ends them (then `list_done`, as after a LIST) and the same stream
  goes on as the watch. So a 100k-object sync costs the API server no large list response. A
  server that refuses the parameters (a 4xx) or ignores them (a bookmark without the
  annotation, a change or the end of the stream before it, or `watch_list_wait` seconds with
  no event) gets paginated LISTs instead (`auto`), said in the log and in
  `zaroz_kube_list_mode`.

Errors never end a reflector: each is counted, logged (rate-limited) and retried after a
jittered backoff that honours Retry-After. The wall clock is read here, never downstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from exporter.sources.backoff import Backoff
from exporter.sources.http import (
    NEEDS_ATTENTION,
    Expired,
    HttpError,
    NotFound,
    Rejected,
    Retry,
    RetryLater,
    TransportError,
    Wording,
    retry_forever,
)
from exporter.sources.kube.api import (
    KubeApi,
    ListPage,
    WatchStream,
    gc_hold,
    gc_release,
    initial_events_end,
)
from exporter.sources.kube.handler import Key, ObjectHandler, object_key, resource_version
from exporter.sources.ports import KubeRecorder
from exporter.sources.tasks import cancel, supervised
from exporter.vocabulary import KUBE_LIST_MODES, KUBE_WATCH_LIST_CHOICES, scope_label

__all__ = ["KubeSource", "ObjectHandler", "Reflector", "WatchListSupport"]

log = logging.getLogger(__name__)

TASK = "kube"  # its task label in zaroz_exporter_task_restarts_total

_SLICE = 100  # list items applied between two yields to the event loop
WATCH_LIST, PAGINATED = KUBE_LIST_MODES


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A page asked ahead and then not wanted (the list restarted, the reflector stopped):
    its failure is nobody's, so it must not be reported as never retrieved."""
    if not task.cancelled():
        task.exception()

Sleep = Callable[[float], Awaitable[Any]]

NOT_SERVED = ("the API server does not serve unitsignals.units.zaroz.cloud/v1 (HTTP 404): is the "
              "UnitSignal CRD installed?")
WORDING = Wording(
    retry_later="kubernetes API asks to retry later",
    failed="kubernetes API request failed",
    unauthorized=("kubernetes API refused the credentials (needs get, list, watch on "
                  "unitsignals.units.zaroz.cloud)"),
    no_credentials="no kubernetes credentials to send",
    # Usually a CRD not installed yet (or deleted): polled with the usual backoff, so its
    # objects appear within one backoff of it being installed.
    not_found=NOT_SERVED,
    rejected="kubernetes API rejected the request",
    recovered="kubernetes API recovered",
)


class WatchListSupport:
    """What the API server showed of the streaming list, shared by one source's reflectors:
    once one of them found it ignored, the others list paginated without trying (each try
    costs a whole stream of ADDED events). A refusal costs one small answer: it makes only that
    reflector's current sync paginated, and the next sync asks again."""

    def __init__(self) -> None:
        self.ignored: str | None = None  # why the server is taken to ignore it


class _Watchdog:
    """Calls `quiet` once `seen[0]` (a count of events) stayed the same for `wait` seconds. A
    check that runs late (the loop was busy: events may be waiting to be read) does not count."""

    def __init__(self, wait: float, seen: list[int], quiet: Callable[[], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._wait, self._seen, self._quiet = wait, seen, quiet
        self._last = seen[0]
        self._handle: asyncio.TimerHandle | None = None
        self._schedule()

    def _schedule(self) -> None:
        self._due = self._loop.time() + self._wait
        self._handle = self._loop.call_at(self._due, self._check)

    def _check(self) -> None:
        late = self._loop.time() - self._due > min(1.0, self._wait / 2)
        if self._seen[0] == self._last and not late:
            self._handle = None
            self._quiet()
            return
        self._last = self._seen[0]
        self._schedule()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class Reflector:
    """Lists and watches one scope (a namespace, or all) into one handler.

    `watch_list`: `auto` syncs by the streaming list where the server offers it, else by
    paginated LISTs; `on` only by the streaming list (a server without it is retried, never
    listed); `off` only by paginated LISTs."""

    def __init__(
        self,
        api: KubeApi,
        handler: ObjectHandler,
        metrics: KubeRecorder,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        page_size: int = 500,
        watch_timeout: int = 300,
        watch_jitter: float = 0.2,
        watch_margin: float = 30.0,
        idle_timeout: float | None = None,
        backoff: Backoff | None = None,
        attention_delay: float = 30.0,
        min_watch_duration: float = 1.0,
        log_interval: float = 60.0,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        watch_list: str = "off",
        watch_list_wait: float = 10.0,
        support: WatchListSupport | None = None,
        died: Callable[[], None] | None = None,
        restart_backoff: Backoff | None = None,
    ) -> None:
        if watch_list not in KUBE_WATCH_LIST_CHOICES:
            raise ValueError(f"watch_list must be one of {KUBE_WATCH_LIST_CHOICES}, "
                             f"not {watch_list!r}")
        self.api = api
        self.handler = handler
        self.metrics = metrics
        self.namespace = namespace or None
        self.scope = scope_label(self.namespace)
        self.label_selector = label_selector or None
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.watch_jitter = watch_jitter
        self.watch_margin = watch_margin
        self.idle_timeout = idle_timeout
        self.backoff = backoff if backoff is not None else Backoff()
        self.min_watch_duration = min_watch_duration
        self.sleep = sleep
        self.clock = clock
        self.rng = rng if rng is not None else random.Random()
        self.watch_list = watch_list
        self.watch_list_wait = watch_list_wait
        self.support = support if support is not None else WatchListSupport()
        self.list_mode: str | None = None  # how the last sync was made (KUBE_LIST_MODES)
        self.synced = False  # the first full LIST reached the handler
        self.absent = False  # the last LIST was answered 404: the resource is not served
        self.last_error: str | None = None  # why the reflector is not in step, for /readyz
        self.resource_version: str | None = None  # None: a LIST is due
        # Where a streaming list starts: the last version seen (the server sends a state at
        # least as new: NotOlderThan), or None for the most recent state (a consistent read):
        # at first, and after the streaming list itself found its version expired or too new.
        self._stream_from: str | None = None
        self._refused = False  # the current sync's streaming list was refused: paginate it
        self._quiet = False  # the initial events stopped coming: the watchdog closed the stream
        self.keys: set[Key] = set()
        self._relist_reason: str | None = "initial"
        self._listed: set[Key] = set()  # keys of the LIST in progress
        self._list_rv: str | None = None
        self._continue: str | None = None
        self._expired_streak = 0
        self._ahead: tuple[str, asyncio.Future[ListPage]] | None = None  # next page, asked for
        # A first 401 made the credentials reload (an expired exec token): retried soon.
        self.retry = Retry(log, WORDING, self.backoff, attention_delay=attention_delay,
                           log_interval=log_interval, not_found_waits=False,
                           retry_first_401=True, scope=self.scope)
        self._task: asyncio.Task[None] | None = None
        self._gc_held = False
        # The task is supervised as serve's loops are: one that dies anyway (outside a step:
        # a pause, the metrics, the log) is logged, told to `died` (serve counts it in
        # zaroz_exporter_task_restarts_total{task="kube"}) and run again after a backoff.
        self.died = died if died is not None else (lambda: None)
        self.restart_backoff = restart_backoff if restart_backoff is not None else Backoff(
            1.0, 60.0)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(
                supervised(TASK, self.run, self.died, self.restart_backoff),
                name=f"kube:{self.scope}")
        return self._task

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel(task)
        self._hold_gc(False)
        self._restart_list()

    async def run(self) -> None:
        self.metrics.start(self.scope)
        self.metrics.synced(self.scope, self.synced)
        log.info("watching unitsignals", extra={
            "scope": self.scope, "label_selector": self.label_selector or ""})
        await retry_forever(self.step, self.sleep, self.backoff, log,
                            "reflector error, retrying", lambda: {"scope": self.scope})

    async def step(self) -> float:
        """One LIST page, one streaming list or one watch; returns the pause before the next
        step."""
        if self.resource_version is not None:
            return await self.watch_once()
        if self._streams():
            return await self.stream_once()
        # The collector stays paused from the first page of a LIST to its end: a collection
        # in between would walk every object applied so far, again and again (measured: 0.3 s
        # of a 100k-object sync, even when paused page by page). It runs again for the pause
        # before a retry (outside, in run()), and when the reflector stops.
        self._hold_gc(True)
        try:
            delay = await self.list_page()
        except BaseException:
            self._hold_gc(False)
            raise
        if delay > 0 or self.resource_version is not None:
            self._hold_gc(False)
        return delay

    def _hold_gc(self, hold: bool) -> None:
        if hold != self._gc_held:
            self._gc_held = hold
            if hold:
                gc_hold()
            else:
                gc_release()

    # -- LIST --------------------------------------------------------------------------------

    def _relist(self, reason: str) -> None:
        if self.resource_version is not None:
            self._stream_from = self.resource_version
        self.resource_version = None
        self._relist_reason = reason

    def _begin_sync(self, mode: str) -> None:
        """A sync (a relist) starts: counted and logged once, whatever it falls back to."""
        if self._relist_reason is not None:
            reason, self._relist_reason = self._relist_reason, None
            self.metrics.relist(self.scope, reason)
            log.log(logging.INFO if reason == "initial" else logging.WARNING, "listing", extra={
                "scope": self.scope, "reason": reason, "list_mode": mode})

    def _streams(self) -> bool:
        """Whether the sync due is a streaming list. Under `auto`, not while the resource is
        not served (its 404s are polled by LIST, as without it), nor once the server was found
        to ignore it, nor for a sync whose streaming list was refused."""
        if self.watch_list != "auto":
            return self.watch_list == "on"
        return not (self.absent or self._refused or self.support.ignored)

    async def list_page(self) -> float:
        """The next page of the LIST in progress; hands the whole set over after the last.
        Called by step(), with the cyclic collector paused."""
        self._begin_sync(PAGINATED)
        cont = self._continue
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] != cont:
            ahead[1].cancel()
            ahead = None
        try:
            page = await (ahead[1] if ahead is not None else self._fetch(cont))
        except Expired as e:
            self._failed("list", e, request=True)
            self._restart_list()
            if cont:  # the continue token outlived its snapshot: list again from the start
                log.warning("list continue token expired, restarting the list", extra={
                    "scope": self.scope})
                return 0.0
            return self._delay_for(e, "list")
        except NotFound as e:
            self._failed("list", e, request=True)
            self._restart_list()
            self._not_served()
            return self._delay_for(e, "list")
        except HttpError as e:
            self._failed("list", e, request=True)
            if isinstance(e, NEEDS_ATTENTION):
                # Whatever caused it may change what the list holds: start the list over.
                self._restart_list()
            return self._delay_for(e, "list")  # a transient error retries the same page
        self._count("list", page.result)
        if cont is None:
            self._list_rv = page.resource_version
        self._continue = page.continue_token
        if page.continue_token is not None:
            # The next page is requested before this one is applied, so the API server
            # serves it meanwhile (client-go's ListPager buffers pages the same way).
            task = asyncio.ensure_future(self._fetch(page.continue_token))
            task.add_done_callback(_retrieved)
            self._ahead = (page.continue_token, task)
            await asyncio.sleep(0)  # the request goes out now, not after the first slice
        # Applied as it arrives and dropped: 100k objects are never all held decoded; in
        # slices, so the request ahead goes out and other tasks run in between.
        items, now = page.items, self.clock()
        for i in range(0, len(items), _SLICE):
            self._deliver_page(items[i:i + _SLICE], now)
            await asyncio.sleep(0)
        if page.continue_token is not None:
            return 0.0
        rv, listed = self._list_rv or page.resource_version, self._listed
        self._restart_list()
        self._deliver(self.handler.list_done, listed, self.clock())
        self._synced_at(listed, rv, PAGINATED)
        # What a full list leaves behind lives as long as the objects do: keep the cyclic
        # collector from walking it again on every full collection.
        gc.freeze()
        return 0.0

    def _fetch(self, continue_token: str | None) -> Awaitable[ListPage]:
        return self.api.list(self.namespace, limit=self.page_size,
                             continue_token=continue_token, label_selector=self.label_selector)

    def _restart_list(self) -> None:
        if self._ahead is not None:
            self._ahead[1].cancel()
            self._ahead = None
        self._listed = set()
        self._continue = None
        self._list_rv = None

    def _not_served(self) -> None:
        """A LIST answered 404: the resource (the CRD) is gone or not there yet, so are all its
        objects; the handler learns it as an empty list (nothing of a deleted CRD is left in
        the exposition). The list is retried with the usual backoff: a CRD installed later is
        picked up at the next try, without a restart."""
        if self.absent:
            return
        self.absent = True
        self._deliver(self.handler.list_done, set(), self.clock())
        self.keys = set()
        self.metrics.objects(self.scope, 0)

    def _synced_at(self, keys: set[Key], rv: str, mode: str) -> None:
        self.absent = False
        self.last_error = None
        self.keys = keys
        self.resource_version = rv
        self._refused = False  # the next sync asks for the streaming list again
        self.metrics.objects(self.scope, len(self.keys))
        if mode != self.list_mode:
            self.metrics.list_mode(self.scope, mode)
        self.list_mode = mode
        self.retry.recovered(resource_version=rv)
        if not self.synced:
            self.synced = True
            self.metrics.synced(self.scope, True)
            log.info("unitsignals synced", extra={
                "scope": self.scope, "objects": len(self.keys), "resource_version": rv,
                "list_mode": mode})

    # -- WATCH -------------------------------------------------------------------------------

    def _open_watch(self, rv: str, initial: bool = False) -> Any:
        timeout = int(self.watch_timeout * (1.0 + self.watch_jitter * self.rng.random()))
        return self.api.watch(
            self.namespace,
            resource_version=rv,
            timeout_seconds=timeout,
            label_selector=self.label_selector,
            idle_timeout=self.idle_timeout,
            margin=self.watch_margin,
            send_initial_events=initial,
        )

    async def watch_once(self) -> float:
        """One watch from the current resourceVersion, read until it ends or breaks."""
        rv = self.resource_version
        assert rv is not None, "never watch without a resourceVersion"
        started = time.monotonic()
        events = 0
        opened = False
        try:
            async with self._open_watch(rv) as stream:
                opened = True
                self._count("watch", "200")
                async with contextlib.aclosing(stream.events()) as evs:
                    async for ev in evs:
                        events += 1
                        self._apply(ev)
        except HttpError as e:
            return self._watch_failed(e, opened)
        return self._watch_ended(events, started)

    def _watch_failed(self, e: HttpError, opened: bool) -> float:
        """A watch refused or broken once in step: relist (410, a refusal) or resume."""
        self._failed("watch", e, request=not opened)
        if isinstance(e, Expired):
            self._expired_streak += 1
            log.warning("watch resourceVersion expired, relisting", extra={
                "scope": self.scope, "resource_version": self.resource_version})
            self._relist("expired")
            # A server that expires every fresh list's version would make this spin.
            return 0.0 if self._expired_streak == 1 else self.backoff.next()
        if isinstance(e, Rejected):
            self._relist("error")
        # Else dropped, cut, timed out, refused for now: resume from the last version seen.
        return self._delay_for(e, "watch")

    def _watch_ended(self, events: int, started: float) -> float:
        if events == 0 and time.monotonic() - started < self.min_watch_duration:
            # The server ends watches at once: resuming at once would spin.
            delay = self.backoff.next()
            self.retry.complain(logging.WARNING, "empty", "watch ended at once without events",
                                delay, resource_version=self.resource_version)
            return delay
        return 0.0

    # -- the streaming list (watch-list) ----------------------------------------------------

    async def stream_once(self) -> float:
        """A sync by the streaming list: its initial events handed over as a LIST's pages are,
        then, from its initial-events-end bookmark on, the same stream read as a watch."""
        self._begin_sync(WATCH_LIST)
        rv = self._stream_from or ""
        started = time.monotonic()
        seen = [0]  # events of the stream so far (the watchdog reads it)
        opened = synced = False
        ignored: str | None = None
        self._quiet = False
        self._hold_gc(True)
        try:
            async with self._open_watch(rv, initial=True) as stream:
                opened = True
                self._count("watch", "200")
                watchdog = self._watchdog(stream, seen)
                try:
                    async with contextlib.aclosing(stream.events()) as evs:
                        ignored = await self._initial_events(evs, seen)
                        watchdog.cancel()
                        if ignored is None:
                            synced = True
                            self._hold_gc(False)
                            async for ev in evs:
                                seen[0] += 1
                                self._apply(ev)
                finally:
                    watchdog.cancel()
        except HttpError as e:
            if synced:
                return self._watch_failed(e, opened)
            if not self._quiet:
                return self._stream_failed(e, opened, rv)
        finally:
            self._hold_gc(False)
            if not synced:
                self._restart_list()
        if synced:
            return self._watch_ended(seen[0], started)
        if self._quiet:  # the watchdog closed it: however the stream ended then
            ignored = (f"no event for {self.watch_list_wait:g} s before the initial-events-end "
                       "bookmark")
        return self._stream_ignored(ignored or "no initial-events-end bookmark")

    async def _initial_events(self, evs: Any, seen: list[int]) -> str | None:
        """Reads a streaming list's initial events into the handler in slices, as a LIST's
        pages. None once its initial-events-end bookmark arrived (the sync is complete), else
        why the server is taken to ignore the streaming list."""
        batch: list[Any] = []
        async for ev in evs:
            seen[0] += 1
            type_, obj = (ev["type"], ev["object"]) if type(ev) is dict else ev
            if type_ == "ADDED":
                batch.append(obj)
                if len(batch) >= _SLICE:
                    self._deliver_page(batch, self.clock())
                    batch = []
                    await asyncio.sleep(0)  # other tasks run between two slices
                continue
            if batch:
                self._deliver_page(batch, self.clock())
                batch = []
            if type_ == "BOOKMARK" and initial_events_end(obj):
                rv = resource_version(obj)
                if rv is None:
                    raise TransportError("invalid_body",
                                         "initial-events-end bookmark without a resourceVersion")
                now = self.clock()
                self.metrics.event(self.scope, type_, now)
                listed = self._listed
                self._listed = set()
                self._deliver(self.handler.list_done, listed, now)
                self._synced_at(listed, rv, WATCH_LIST)
                gc.freeze()  # as after a LIST: what it left behind lives as long as the objects
                return None
            if type_ == "BOOKMARK":
                return "a bookmark without the initial-events-end annotation"
            return f"a {type_} event before the initial-events-end bookmark"
        if batch:
            self._deliver_page(batch, self.clock())
        if seen[0]:
            # Initial events came, then a clean end: an API server restarting gracefully, or a
            # proxy closing the watch, mid-way. A server that ignores the streaming list sends
            # no initial events; this one was streaming them, so the sync starts over as after
            # any cut stream, streaming again.
            raise TransportError("truncated", "the stream ended before its initial-events-end "
                                 "bookmark")
        return "the stream ended before the initial-events-end bookmark"

    def _watchdog(self, stream: WatchStream, seen: list[int]) -> _Watchdog:
        """Closes the stream when no event came for `watch_list_wait` seconds before the
        initial-events-end bookmark: a server that ignores sendInitialEvents may send neither
        events nor bookmarks for minutes. Checked every `watch_list_wait` seconds, so the hot
        path only counts events."""

        def quiet() -> None:
            self._quiet = True
            stream.close()

        return _Watchdog(self.watch_list_wait, seen, quiet)

    def _stream_failed(self, e: HttpError, opened: bool, rv: str) -> float:
        """The streaming list failed before its initial-events-end bookmark."""
        self._failed("watch", e, request=not opened)
        if isinstance(e, NotFound):
            self._not_served()
            return self._delay_for(e, "watch")
        if isinstance(e, Rejected) and not opened and self.watch_list == "auto":
            # An API server without the streaming list (or with it switched off) refuses
            # sendInitialEvents or resourceVersionMatch on a watch (400, 422).
            self._refused = True
            log.warning("the API server refused the streaming list; listing paginated",
                        extra={"scope": self.scope, "error": str(e)})
            return 0.0
        too_new = isinstance(e, RetryLater) and e.status == 504 and bool(rv)
        if isinstance(e, Expired) or too_new:
            # The version streamed from is gone (or not there yet): stream again, from the
            # most recent state (as client-go does), counted as a relist.
            self._stream_from = None
            self._relist_reason = "expired"
            self._expired_streak += 1
            log.warning("streaming list resourceVersion expired, streaming again", extra={
                "scope": self.scope, "resource_version": rv})
            return 0.0 if self._expired_streak == 1 else self.backoff.next()
        # Cut, timed out, refused for now: the sync starts over after the usual pause.
        return self._delay_for(e, "watch")

    def _stream_ignored(self, why: str) -> float:
        """The server ignored sendInitialEvents: paginated lists from now on (`auto`), or a
        complaint and a retry (`on`)."""
        if self.watch_list == "on":
            delay = self.backoff.next()
            self.retry.complain(logging.ERROR, "ignored", "the API server ignores the streaming "
                                "list (--kube-watch-list on)", delay, reason=why)
            return delay
        if self.support.ignored is None:
            self.support.ignored = why
            log.warning("the API server ignores the streaming list; listing paginated",
                        extra={"scope": self.scope, "reason": why})
        return 0.0

    def _apply(self, ev: Any) -> None:
        """One event: a dict (untyped), or a (type, object) tuple (typed, see typed.py)."""
        type_, obj = (ev["type"], ev["object"]) if type(ev) is dict else ev
        now = self.clock()
        self.metrics.event(self.scope, type_, now)
        if self._expired_streak or self.backoff.failures:
            self._expired_streak = 0
            self.retry.recovered(resource_version=self.resource_version)
        keys = self.keys
        n = len(keys)
        if type_ == "MODIFIED" or type_ == "ADDED":
            key = object_key(obj)
            if key is not None:
                keys.add(key)
            try:  # _deliver's guard, inline: the watch's hot path
                self.handler.upsert(obj, now)
            except Exception:
                self._failed_call("upsert")
        elif type_ == "DELETED":
            key = object_key(obj)
            if key is not None:
                keys.discard(key)
            self._deliver(self.handler.delete, obj, now)
        elif type_ != "BOOKMARK":
            return  # a type this reflector does not know: its version is not trusted either
        rv = resource_version(obj)
        if rv is not None:
            self.resource_version = rv
        if len(keys) != n:
            self.metrics.objects(self.scope, len(keys))

    def _deliver_page(self, items: list[Any], now: float) -> None:
        """A slice of a LIST page to a paged handler. The keys it returns (object_key's, of the
        objects it took) are the list's; they are worked out here only when it returns none
        or fails (measured: 0.1 s of a 100k-object sync to compute them twice)."""
        keys = self._deliver(self.handler.list_page, items, now)
        if keys is None:
            keys = [k for k in map(object_key, items) if k is not None]
        self._listed.update(keys)

    def _deliver(self, call: Callable[[Any, float], Any], arg: Any, now: float) -> Any:
        """A handler bug must not stall the reflector (the same event would fail forever):
        the call's result, or None when it failed."""
        try:
            return call(arg, now)
        except Exception:
            self._failed_call(call.__name__)
            return None

    def _failed_call(self, call: str) -> None:
        """Within an `except`: the handler's exception is logged with its traceback."""
        log.exception("unitsignal handler failed", extra={"scope": self.scope, "call": call})

    # -- bookkeeping -------------------------------------------------------------------------

    def _count(self, verb: str, result: str) -> None:
        self.metrics.request(self.scope, verb, result)

    def _failed(self, verb: str, e: HttpError, request: bool) -> None:
        """`request`: the failure is the request's outcome (not an open stream breaking)."""
        if request:
            self._count(verb, e.result)
        self.last_error = f"{verb}: {e}"
        self.metrics.failure(self.scope, verb, e.result)

    def _delay_for(self, e: HttpError, verb: str) -> float:
        return self.retry.failed(e, verb=verb, resource_version=self.resource_version)


class KubeSource:
    """One reflector per namespace when namespaces are given, else one cluster-wide, sharing
    what they learn of the streaming list (`WatchListSupport`).

    `handler_for(namespace)` gives each reflector its handler (namespace None: cluster-wide),
    since a handler's `list_done` reconciles one reflector's whole scope.
    """

    def __init__(
        self,
        api: KubeApi,
        handler_for: Callable[[str | None], ObjectHandler],
        metrics: KubeRecorder,
        *,
        namespaces: Sequence[str] | None = None,
        label_selector: str | None = None,
        backoff_factory: Callable[[], Backoff] = Backoff,
        **reflector_options: Any,
    ) -> None:
        scopes: list[str | None] = list(dict.fromkeys(namespaces)) if namespaces else [None]
        reflector_options.setdefault("support", WatchListSupport())
        self.reflectors = [
            Reflector(api, handler_for(ns), metrics, namespace=ns, label_selector=label_selector,
                      backoff=backoff_factory(), **reflector_options)
            for ns in scopes
        ]

    async def start(self) -> None:
        for r in self.reflectors:
            r.start()

    async def stop(self) -> None:
        await asyncio.gather(*(r.stop() for r in self.reflectors))

    @property
    def synced(self) -> bool:
        return all(r.synced for r in self.reflectors)

    def readiness(self) -> tuple[bool, str]:
        """For the server's /readyz: the verdict and why. Not ready while the resource is not
        served (a missing or deleted CRD: the exporter cannot see any UnitSignal), nor before
        the first list, with the last error when there is one."""
        n = len(self.reflectors)
        absent = [r.scope for r in self.reflectors if r.absent]
        if absent:
            return False, f"{NOT_SERVED} (scopes: {', '.join(absent[:5])})"
        behind = [r for r in self.reflectors if not r.synced]
        if behind:
            why = f"unitsignals not listed yet in {len(behind)} of {n} scopes: " + ", ".join(
                r.scope for r in behind[:5])
            errors = [r.last_error for r in behind if r.last_error]
            return False, why + (f" (last error: {errors[0]})" if errors else "")
        return True, f"unitsignals synced in {n} scope{'' if n == 1 else 's'}"
