"""The list/watch reflector against the Kubernetes emulator: sync, resume, relist, faults."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.kube import KubeMetrics
from exporter.sources.backoff import Backoff
from exporter.sources.kube.api import KubeApi
from exporter.sources.kube.config import from_url
from exporter.sources.kube.handler import Key, object_key
from exporter.sources.kube.reflector import KubeSource, Reflector
from tests.kubestore import Store
from tests.waiting import until
from zaroz_sim.kube.emulator import KubeEmulator

WL = "units.zaroz.cloud/workload"


def spec(unit: str, gen: int = 1) -> dict[str, Any]:
    return {"unitId": unit, "generation": gen}


def server_state(emu: KubeEmulator, ns: str | None = None, selector: Callable[[dict], bool] | None
                 = None) -> dict[tuple[str, str], str]:
    out = {}
    for obj in emu.store.objects.values():
        meta = obj["metadata"]
        if (ns is None or meta["namespace"] == ns) and (selector is None or selector(obj)):
            out[(meta["namespace"], meta["name"])] = meta["resourceVersion"]
    return out


class Sleeps:
    """Records every pause the reflector asks for and waits only a moment."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0.001)


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    e = KubeEmulator(seed=1, bookmark_interval_s=0.05)
    e.url = await e.start()  # type: ignore[attr-defined]
    yield e
    await e.stop()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def reflector(emu: KubeEmulator, session: aiohttp.ClientSession, store: Store,
              metrics: KubeMetrics | None = None, **kw: Any) -> tuple[Reflector, Sleeps]:
    sleeps = Sleeps()
    api = KubeApi(session, from_url(emu.url), request_timeout=5)  # type: ignore[attr-defined]
    opts: dict[str, Any] = {"page_size": 10, "watch_timeout": 30, "sleep": sleeps,
                            "backoff": Backoff(0.01, 0.05)}
    opts.update(kw)
    return Reflector(api, store, metrics or KubeMetrics(Registry()), **opts), sleeps


def _counts(r: Reflector, name: str) -> Counter[str]:
    """A reflector's series of a `zaroz_kube_*` counter, as "label:label" -> value (zeros left
    out), read from the registry its metrics write to."""
    metrics = r.metrics
    assert isinstance(metrics, KubeMetrics)
    return Counter({":".join(k[1:]): s.value
                    for k, s in metrics.registry[name].series.items()  # type: ignore[union-attr]
                    if k[0] == r.scope and s.value})  # type: ignore[union-attr]


def requests(r: Reflector) -> Counter[str]:
    """"verb:result" -> requests (zaroz_kube_requests_total)."""
    return _counts(r, "zaroz_kube_requests_total")


def failures(r: Reflector) -> Counter[str]:
    """"verb:reason" -> failures (zaroz_kube_failures_total)."""
    return _counts(r, "zaroz_kube_failures_total")


def relists(r: Reflector) -> Counter[str]:
    """reason -> relists started (zaroz_kube_relists_total)."""
    return _counts(r, "zaroz_kube_relists_total")


def populate(emu: KubeEmulator, n: int = 25) -> None:
    for i in range(n):
        ns = "a" if i % 2 else "b"
        emu.create(ns, f"us-{i:03d}", spec(f"u{i}"), labels={WL: "web" if i % 3 else "batch"})


async def synced(r: Reflector) -> Reflector:
    r.start()
    await until(lambda: r.synced)
    return r


async def test_initial_paginated_sync(emu, session):
    populate(emu)
    store = Store()
    registry = Registry()
    r, _ = reflector(emu, session, store, metrics=KubeMetrics(registry))
    await synced(r)
    try:
        assert store.versions() == server_state(emu)
        assert store.calls == {"list_done": 1, "upsert": 0, "delete": 0}
        lists = [q.query for q in emu.request_log if q.kind == "list"]
        assert len(lists) == 3 and all(q["limit"] == "10" for q in lists)
        assert "continue" not in lists[0] and all("continue" in q for q in lists[1:])
        assert all("resourceVersion" not in q for q in lists)
        assert r.resource_version == str(emu.resource_version)
        assert relists(r) == {"initial": 1}
        await until(lambda: emu.count("watch") == 1)
        fam = registry["zaroz_kube_objects"]
        assert fam.series[("*",)].value == 25
        assert registry["zaroz_kube_synced"].series[("*",)].value == 1
        assert registry["zaroz_kube_requests_total"].series[("*", "list", "200")].value == 3
        assert registry["zaroz_kube_relists_total"].series[("*", "initial")].value == 1
        assert registry["zaroz_kube_relists_total"].series[("*", "expired")].value == 0
    finally:
        await r.stop()


async def test_watch_applies_changes_and_never_starts_without_a_version(emu, session):
    populate(emu, 3)
    store = Store()
    registry = Registry()
    r, _ = reflector(emu, session, store, metrics=KubeMetrics(registry))
    await synced(r)
    try:
        await until(lambda: emu.count("watch") == 1)
        emu.create("a", "new", spec("n"))
        emu.update_spec("a", "new", spec("n", 2))
        emu.patch_status("a", "new", {"observedGeneration": 2})
        emu.delete("b", "us-000")
        await until(lambda: store.versions() == server_state(emu))
        assert store.calls == {"list_done": 1, "upsert": 3, "delete": 1}
        assert store.objects[("a", "new")]["status"] == {"observedGeneration": 2}
        assert isinstance(store.last_now, float) and store.last_now > 1e9
        for q in emu.request_log:
            if q.kind == "watch":
                assert q.query["resourceVersion"] not in ("", "0")
                assert q.query["allowWatchBookmarks"] == "true"
                assert 30 <= int(q.query["timeoutSeconds"]) <= 36
        events = registry["zaroz_kube_watch_events_total"]
        assert events.series[("*", "ADDED")].value == 1
        assert events.series[("*", "MODIFIED")].value == 2
        assert events.series[("*", "DELETED")].value == 1
        assert registry["zaroz_kube_objects"].series[("*",)].value == 3
        assert registry["zaroz_kube_last_watch_event_timestamp_seconds"].series[("*",)].value \
            > 1e9
    finally:
        await r.stop()


async def test_resumed_watch_replays_nothing_and_bookmarks_advance_the_version(emu, session):
    populate(emu, 6)
    store = Store()
    r, _ = reflector(emu, session, store, namespace="a", watch_timeout=1, watch_jitter=0)
    await synced(r)
    try:
        await until(lambda: emu.count("watch") == 1)
        listed_rv = r.resource_version
        # Writes outside the namespace are never shown, but bookmarks carry their versions.
        emu.create("b", "elsewhere", spec("x"))
        target = str(emu.resource_version)
        await until(lambda: r.resource_version == target)
        assert store.calls["upsert"] == 0 and r.resource_version != listed_rv
        emu.faults.cut_watch(after_events=2)  # the next watch (the open one ends within 1 s)
        await until(lambda: emu.count("watch") >= 2)
        for i in range(5):
            emu.update_spec("a", "us-001", spec("u1", i + 2))
        await until(lambda: store.versions() == server_state(emu, "a"))
        await until(lambda: emu.count("watch") >= 4)
        assert emu.count("list") == 1  # no relist
        assert store.calls == {"list_done": 1, "upsert": 5, "delete": 0}  # no ADDED storm
        watches = [q.query["resourceVersion"] for q in emu.request_log if q.kind == "watch"]
        assert watches[0] == listed_rv
        # Each resumed watch starts at the last version the previous one delivered.
        assert all(int(b) >= int(a) for a, b in itertools.pairwise(watches))
        assert int(watches[1]) >= int(target)
        assert relists(r) == {"initial": 1}
    finally:
        await r.stop()


async def test_expired_version_relists_and_drops_objects_deleted_meanwhile(emu, session):
    populate(emu, 8)
    store = Store()
    registry = Registry()
    r, _ = reflector(emu, session, store, metrics=KubeMetrics(registry), watch_timeout=1)
    await synced(r)
    await until(lambda: emu.count("watch") == 1)
    await r.stop()
    emu.delete("a", "us-001")
    emu.delete("b", "us-002")
    emu.create("a", "late", spec("l"))
    emu.compact()
    r.start()
    try:
        await until(lambda: store.versions() == server_state(emu))
        assert ("a", "us-001") not in store.objects and ("a", "late") in store.objects
        assert relists(r) == {"initial": 1, "expired": 1}
        assert store.calls["list_done"] == 2 and store.calls["delete"] == 0
        assert registry["zaroz_kube_relists_total"].series[("*", "expired")].value == 1
        assert failures(r)["watch:410"] == 1
        # A 410 as an ERROR event inside a 200 stream relists too.
        emu.faults.expire_watch()
        await until(lambda: relists(r)["expired"] == 2)
        await until(lambda: r.resource_version is not None and r.synced)
        emu.create("b", "after", spec("z"))
        await until(lambda: store.versions() == server_state(emu))
    finally:
        await r.stop()


async def test_retry_after_is_honoured(emu, session):
    populate(emu, 3)
    emu.faults.status(429, retry_after=7, on="list")
    store = Store()
    r, sleeps = reflector(emu, session, store, watch_timeout=1)
    await synced(r)
    try:
        assert sleeps.delays and 7 <= sleeps.delays[0] <= 7 * 1.1 + 0.05
        assert requests(r)["list:429"] == 1 and store.versions() == server_state(emu)
        emu.faults.status(503, retry_after=3, on="watch")
        await until(lambda: requests(r)["watch:503"] == 1)
        await until(lambda: len(sleeps.delays) >= 2)
        assert sleeps.delays[1] >= 3
    finally:
        await r.stop()


async def test_errors_and_drops_lose_and_duplicate_nothing(emu, session):
    populate(emu, 12)
    emu.faults.status(500, on="list")
    emu.faults.drop(on="list", times=2)
    store = Store()
    r, _ = reflector(emu, session, store, page_size=5, watch_timeout=1)
    await synced(r)
    try:
        assert store.versions() == server_state(emu)
        emu.faults.status(500, on="watch", times=2)
        emu.faults.drop(on="watch", times=2)
        emu.faults.cut_watch(after_events=1, times=3)
        changes = 0
        for i in range(12):
            await asyncio.sleep(0.01)
            emu.update_spec("a" if i % 2 else "b", f"us-{i:03d}", spec(f"u{i}", 5))
            changes += 1
        emu.delete("a", "us-003")
        await until(lambda: store.versions() == server_state(emu))
        await until(lambda: not emu.faults.pending)
        await asyncio.sleep(0.05)
        assert emu.count("list") == 3 + 3  # 1 failed, 2 dropped (1 retried by aiohttp), 3 pages
        assert store.calls == {"list_done": 1, "upsert": changes, "delete": 1}
        assert relists(r) == {"initial": 1}
        assert failures(r)["watch:500"] == 2 and failures(r)["watch:connection"] >= 1
        assert store.versions() == server_state(emu)
    finally:
        await r.stop()


async def test_truncated_watch_line_is_not_data(emu, session):
    populate(emu, 2)
    store = Store()
    r, _ = reflector(emu, session, store, watch_timeout=1, watch_jitter=0)
    await synced(r)
    try:
        await until(lambda: emu.count("watch") == 1)
        emu.faults.truncate(on="watch", after_events=1)
        await until(lambda: emu.count("watch") == 2)
        emu.create("a", "x1", spec("1"))
        emu.create("a", "x2", spec("2"))  # cut in half on the wire
        emu.create("a", "x3", spec("3"))
        await until(lambda: store.versions() == server_state(emu))
        assert failures(r)["watch:truncated"] == 1
        assert store.calls["upsert"] == 3 and relists(r) == {"initial": 1}
    finally:
        await r.stop()


async def test_expired_continue_token_restarts_the_list(emu, session):
    populate(emu, 25)
    emu.faults.expire_continue()
    store = Store()
    r, _ = reflector(emu, session, store)
    await synced(r)
    try:
        lists = [q.query for q in emu.request_log if q.kind == "list"]
        # page 1, page 2 refused (410), then pages 1, 2, 3 again
        assert len(lists) == 5 and "continue" not in lists[2]
        assert requests(r)["list:410"] == 1
        assert store.calls["list_done"] == 1 and store.versions() == server_state(emu)
    finally:
        await r.stop()


async def test_namespaces_and_label_selector_are_passed(emu, session):
    populate(emu, 20)
    emu.create("c", "other-ns", spec("c"), labels={WL: "web"})
    stores: dict[str | None, Store] = {}

    def handler_for(ns: str | None) -> Store:
        return stores.setdefault(ns, Store())

    api = KubeApi(session, from_url(emu.url))  # type: ignore[attr-defined]
    src = KubeSource(api, handler_for, KubeMetrics(Registry()), namespaces=["a", "b", "a"],
                     label_selector=f"{WL}=web", page_size=4, watch_timeout=30)
    assert [r.namespace for r in src.reflectors] == ["a", "b"]
    assert src.readiness()[0] is False
    await src.start()
    try:
        await until(lambda: src.synced)
        assert src.readiness() == (True, "unitsignals synced in 2 scopes")

        def web(obj: dict) -> bool:
            return obj["metadata"].get("labels", {}).get(WL) == "web"

        for ns in ("a", "b"):
            assert stores[ns].versions() == server_state(emu, ns, web)
        for q in emu.request_log:
            if q.kind in ("list", "watch"):
                assert q.path.split("/")[5] in ("a", "b")
                assert q.query["labelSelector"] == f"{WL}=web"
        # Relabelling out of the selector is a DELETED for this watcher.
        name = next(iter(stores["a"].objects))[1]
        emu.set_labels("a", name, {WL: "batch"})
        await until(lambda: ("a", name) not in stores["a"].objects)
        assert stores["a"].versions() == server_state(emu, "a", web)
    finally:
        await src.stop()


async def test_unauthorized_is_retried_slowly(emu, session, tmp_path):
    emu.token = "right"
    tok = tmp_path / "token"
    tok.write_text("wrong\n")
    store = Store()
    sleeps = Sleeps()
    api = KubeApi(session, from_url(emu.url, tok))  # type: ignore[attr-defined]
    r = Reflector(api, store, KubeMetrics(Registry()), sleep=sleeps, backoff=Backoff(0.01, 0.05),
                  attention_delay=5)
    r.start()
    try:
        await until(lambda: len(sleeps.delays) >= 2)
        # The first 401 is retried soon (credentials were reloaded), the next ones slowly.
        assert sleeps.delays[0] < 1 and sleeps.delays[1] >= 5 and not r.synced
        assert requests(r)["list:401"] >= 2
        tok.write_text("right\n")
        await until(lambda: r.synced)
    finally:
        await r.stop()



async def test_collector_paused_while_a_list_is_fetched_and_applied_only(emu):
    """The cyclic GC is off while a LIST is fetched and applied (its requests included) and on
    again when it ends, pauses before a retry, or is stopped half-way."""
    populate(emu, 25)
    assert gc.isenabled()
    at_request: list[bool] = []  # gc state as each LIST request goes out

    async def on_start(_s: Any, _c: Any, params: aiohttp.TraceRequestStartParams) -> None:
        if "watch" not in params.url.query:
            at_request.append(gc.isenabled())

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)
    emu.faults.status(500, on="list")  # the first page fails: a pause before the retry
    async with aiohttp.ClientSession(trace_configs=[trace]) as session:
        r, sleeps = reflector(emu, session, Store(), watch_timeout=1)
        at_sleep: list[bool] = []

        async def sleep(delay: float) -> None:
            at_sleep.append(gc.isenabled())
            await sleeps(delay)

        r.sleep = sleep
        await synced(r)
        await r.stop()
        assert at_request == [False] * 4  # the failed page, then the three of the list
        assert at_sleep[0] is True  # not paused while waiting to retry
        assert gc.isenabled()

        # stopped while waiting for its second page: the collector runs again
        emu.faults.slow(0, on="list")  # the first page at once,
        emu.faults.slow(30, on="list")  # the second one never in time
        n = emu.count("list")
        r, _ = reflector(emu, session, Store())
        r.start()
        await until(lambda: emu.count("list") == n + 2)
        assert not gc.isenabled()
        await r.stop()
        assert gc.isenabled()


async def test_collector_stays_paused_between_the_pages_of_a_list(emu, session):
    """Paused from the first page of a LIST to its end, not page by page: re-enabled between
    two pages, the collector would walk everything applied so far (a threshold of 1 makes any
    allocation then collect)."""
    populate(emu, 25)
    r, _ = reflector(emu, session, Store(), watch_timeout=1)
    mid_list: list[int] = []

    def on_gc(phase: str, _info: dict[str, int]) -> None:
        if phase == "start" and r._continue is not None:
            mid_list.append(1)

    threshold = gc.get_threshold()
    gc.callbacks.append(on_gc)
    gc.set_threshold(1)
    try:
        await synced(r)
        assert requests(r)["list:200"] == 3  # a list of three pages was made
        assert mid_list == []
        assert gc.isenabled()
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(on_gc)
        await r.stop()


class PagedStore(Store):
    """A store that logs each slice of a LIST it is given."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def list_page(self, objects: list[Any], now: float) -> list[Key] | None:
        self.log.append(f"apply {len(objects)}")
        return super().list_page(objects, now)


async def test_next_list_page_is_asked_for_before_this_one_is_applied(emu):
    populate(emu, 25)
    log: list[str] = []

    async def on_start(_s: Any, _c: Any, params: aiohttp.TraceRequestStartParams) -> None:
        if "watch" not in params.url.query:
            log.append("request" + (" continue" if "continue" in params.url.query else ""))

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)
    async with aiohttp.ClientSession(trace_configs=[trace]) as session:
        store = PagedStore(log)
        r, _ = reflector(emu, session, store, watch_timeout=1)
        await synced(r)
        await r.stop()
    assert log == ["request", "request continue", "apply 10", "request continue", "apply 10",
                   "apply 5"]
    assert store.versions() == server_state(emu)
    assert emu.count("list") == 3  # nothing asked twice


async def test_a_page_asked_ahead_that_fails_is_retried_and_loses_nothing(emu, session):
    populate(emu, 25)
    emu.faults.slow(0, on="list")  # the first page as usual;
    emu.faults.status(500, on="list")  # the second, asked ahead, fails
    emu.faults.expire_continue()  # and its retry finds the snapshot gone: the list restarts
    store = PagedStore([])
    r, sleeps = reflector(emu, session, store, watch_timeout=1)
    await synced(r)
    try:
        assert store.versions() == server_state(emu)
        assert requests(r)["list:500"] == 1 and requests(r)["list:410"] == 1
        assert relists(r) == {"initial": 1}
        assert len(sleeps.delays) == 1  # the pause after the 500
    finally:
        await r.stop()


class KeyedStore(PagedStore):
    """A paged handler that returns the keys it took, as the cluster handler does; it fails on
    the slice holding `fail_on`."""

    def __init__(self, fail_on: str) -> None:
        super().__init__([])
        self.fail_on = fail_on
        self.returned: list[Key] = []

    def list_page(self, objects: list[Any], now: float) -> list[Key]:
        if any(o["metadata"]["name"] == self.fail_on for o in objects):
            raise RuntimeError("a handler bug")
        super().list_page(objects, now)
        keys = [k for k in map(object_key, objects) if k is not None]
        self.returned += keys
        return keys


async def test_list_keys_come_from_the_handler_or_from_the_page_when_it_fails(emu, session,
                                                                             caplog):
    """The keys a paged handler returns are the list's; for a slice it failed on, the
    reflector reads them from the page, so nothing listed is taken for deleted."""
    caplog.set_level(logging.ERROR, logger="exporter.sources.kube.reflector")
    populate(emu, 25)
    store = KeyedStore(fail_on="us-013")
    r, _ = reflector(emu, session, store, watch_timeout=1)
    await synced(r)
    try:
        assert r.keys == set(server_state(emu))  # the failed slice's keys too
        assert len(store.returned) == 15 and set(store.returned) < r.keys
        failed = [rec for rec in caplog.records if rec.getMessage() == "unitsignal handler failed"]
        assert [rec.call for rec in failed] == ["list_page"]  # type: ignore[attr-defined]
        assert not failures(r)  # a handler bug is no failed request
    finally:
        await r.stop()


async def test_a_reflector_task_that_dies_is_logged_counted_and_restarted(emu, session,
                                                                         caplog):
    """A fault outside a step (here the pause after a 503 raises) ends the run: the task is
    supervised as serve's loops are, so it is logged, counted and run again, and syncs."""
    populate(emu, 3)
    emu.faults.status(503, on="list")
    died: list[int] = []
    sleeps = Sleeps()

    async def breaks_once(delay: float) -> None:
        if not sleeps.delays:
            sleeps.delays.append(delay)
            raise RuntimeError("injected pause fault")
        await sleeps(delay)

    store = Store()
    caplog.set_level(logging.ERROR, logger="exporter.tasks")
    r, _ = reflector(emu, session, store, sleep=breaks_once, died=lambda: died.append(1),
                     restart_backoff=Backoff(0.001, 0.002))
    await synced(r)
    try:
        assert died == [1]
        assert [m.__dict__["task"] for m in caplog.records
                if m.getMessage().startswith("background task died")] == ["kube"]
        assert store.versions() == server_state(emu)
    finally:
        await r.stop()
