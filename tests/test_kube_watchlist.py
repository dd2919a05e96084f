"""The streaming list (client-go's watch-list) against the Kubernetes emulator: a sync by one
watch with sendInitialEvents where the server offers it, and paginated LISTs where it refuses
(400, 422) or ignores (no initial-events-end bookmark) the parameters; the objects held after either
are the same, deletions while away included."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.kube import KubeMetrics
from exporter.sources.backoff import Backoff
from exporter.sources.kube.api import INITIAL_EVENTS_END, KubeApi
from exporter.sources.kube.config import from_url
from exporter.sources.kube.reflector import KubeSource, Reflector
from tests import test_kube_reflector
from tests.kubestore import Store
from tests.test_kube_reflector import server_state, synced
from tests.waiting import until
from zaroz_sim.kube.emulator import KubeEmulator

WL = "units.zaroz.cloud/workload"
session = test_kube_reflector.session  # the fixture
STREAMING = {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
             "allowWatchBookmarks": "true"}


def spec(unit: str, gen: int = 1) -> dict[str, Any]:
    return {"unitId": unit, "key": unit, "contractVersion": 1, "generation": gen}


def populate(emu: KubeEmulator, n: int = 250) -> None:
    for i in range(n):
        emu.create("a" if i % 2 else "b", f"us-{i:03d}", spec(f"u{i}"),
                   labels={WL: "web" if i % 3 else "batch"})


class Old(KubeEmulator):
    """An API server that does not know the streaming list: the parameters never reach it.
    `sent` is every watch's query as the client sent it."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.sent: list[dict[str, str]] = []

        @web.middleware
        async def ignoring(request: web.Request, handler: Any) -> web.StreamResponse:
            if request.query.get("watch"):
                self.sent.append(dict(request.query))
            query = {k: v for k, v in request.query.items()
                     if k not in ("sendInitialEvents", "resourceVersionMatch")}
            rel = request.rel_url.with_query(query)
            return await handler(request.clone(rel_url=rel))  # type: ignore[no-any-return]

        self.app.middlewares.append(ignoring)


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    e = KubeEmulator(seed=1, bookmark_interval_s=0.05)
    await e.start()
    yield e
    await e.stop()


@pytest.fixture
async def old_emu() -> AsyncIterator[Old]:
    """Ignores sendInitialEvents; bookmarks (never annotated) come every 50 ms."""
    e = Old(seed=1, bookmark_interval_s=0.05)
    await e.start()
    yield e
    await e.stop()


def reflector(emu: KubeEmulator, session: aiohttp.ClientSession, store: Store,
              registry: Registry | None = None, typed: bool = True,
              **kw: Any) -> Reflector:
    api = KubeApi(session, from_url(emu.url), request_timeout=5, typed=typed)  # type: ignore[arg-type]
    opts: dict[str, Any] = {"page_size": 10, "watch_timeout": 30, "watch_list": "auto",
                            "backoff": Backoff(0.01, 0.05)}
    opts.update(kw)
    return Reflector(api, store, KubeMetrics(registry or Registry()), **opts)


def modes(registry: Registry, scope: str = "*") -> dict[str, float]:
    fam = registry["zaroz_kube_list_mode"]
    return {k[1]: s.value for k, s in fam.series.items() if k[0] == scope}  # type: ignore[union-attr]


def relists(registry: Registry) -> Counter[str]:
    fam = registry["zaroz_kube_relists_total"]
    return Counter({k[1]: s.value for k, s in fam.series.items() if s.value})  # type: ignore[union-attr]


def streaming_watches(emu: KubeEmulator) -> list[dict[str, str]]:
    """The streaming lists asked for (as sent: an `Old` server never sees the parameters)."""
    queries = emu.sent if isinstance(emu, Old) else [
        q.query for q in emu.request_log if q.kind == "watch"]
    return [q for q in queries if q.get("sendInitialEvents") == "true"]


# -- the server offers it ------------------------------------------------------------------------


@pytest.mark.parametrize("typed", [True, False], ids=["typed", "untyped"])
async def test_streaming_sync_is_one_watch_and_no_list(emu, session, typed, caplog):
    caplog.set_level(logging.INFO, logger="exporter.sources.kube.reflector")
    populate(emu)
    store, registry = Store(), Registry()
    r = await synced(reflector(emu, session, store, registry, typed=typed))
    try:
        assert store.versions() == server_state(emu)
        assert emu.count("list") == 0
        (first,) = streaming_watches(emu)
        assert STREAMING.items() <= first.items() and "resourceVersion" not in first
        assert r.list_mode == "watch-list" and r.resource_version == str(emu.resource_version)
        assert modes(registry) == {"watch-list": 1, "paginated": 0}
        assert relists(registry) == {"initial": 1}
        assert store.calls == {"list_done": 1, "upsert": 0, "delete": 0}
        assert store.pages >= 3  # handed over in slices, as a LIST's pages
        synced_log = [rec for rec in caplog.records if rec.getMessage() == "unitsignals synced"]
        assert [rec.list_mode for rec in synced_log] == ["watch-list"]  # type: ignore[attr-defined]
        # The same stream goes on as the watch: changes arrive without another request.
        emu.update_spec("a", "us-001", spec("u1", 2))
        emu.delete("b", "us-000")
        emu.create("a", "new", spec("n"))
        await until(lambda: store.versions() == server_state(emu))
        assert emu.count("watch") == 1 and emu.count("list") == 0
        assert store.calls == {"list_done": 1, "upsert": 2, "delete": 1}
    finally:
        await r.stop()


async def test_streaming_and_paginated_syncs_hold_the_same_objects_deletions_included(emu,
                                                                                      session):
    """An exporter away while objects changed and went: the streaming re-sync leaves it with
    exactly what a fresh paginated sync holds."""
    populate(emu, 60)
    store = Store()
    r = await synced(reflector(emu, session, store))
    await until(lambda: emu.count("watch") == 1)
    await r.stop()
    for i in range(0, 60, 7):
        emu.delete("a" if i % 2 else "b", f"us-{i:03d}")
    emu.update_spec("a", "us-003", spec("u3", 9))
    emu.patch_status("b", "us-004", {"seq": 4})
    emu.create("a", "late", spec("late"))
    again = await synced(reflector(emu, session, store))  # a new process: a new reflector
    paged = Store()
    plain = await synced(reflector(emu, session, paged, watch_list="off"))
    try:
        assert again.list_mode == "watch-list" and plain.list_mode == "paginated"
        assert store.objects == paged.objects  # the same objects, every field
        assert store.versions() == server_state(emu)
        assert ("b", "us-000") not in store.objects and ("a", "late") in store.objects
        assert store.calls["list_done"] == 2 and store.calls["delete"] == 0
    finally:
        await again.stop()
        await plain.stop()


async def test_a_410_during_the_initial_stream_streams_again(emu, session):
    populate(emu, 30)
    emu.faults.expire_watch()  # the first streaming list answers an ERROR 410 event
    store, registry = Store(), Registry()
    r = await synced(reflector(emu, session, store, registry))
    try:
        assert store.versions() == server_state(emu)
        assert relists(registry) == {"initial": 1, "expired": 1}
        assert len(streaming_watches(emu)) == 2 and emu.count("list") == 0
        assert r.list_mode == "watch-list"
    finally:
        await r.stop()


async def test_a_410_on_the_watch_streams_from_the_last_version_seen(emu, session):
    """As client-go: the relist after an expired watch asks for a state not older than the
    last version seen (the server can serve it from its cache, no consistent read)."""
    populate(emu, 30)
    store, registry = Store(), Registry()
    r = await synced(reflector(emu, session, store, registry, watch_timeout=1, watch_jitter=0))
    try:
        await until(lambda: emu.count("watch") == 1)
        seen = r.resource_version
        emu.faults.expire_watch()
        emu.delete("a", "us-001")
        await until(lambda: store.calls["list_done"] == 2, timeout=10)  # the relist is done
        assert relists(registry)["expired"] == 1 and store.versions() == server_state(emu)
        second = streaming_watches(emu)[1]
        assert second["resourceVersion"] and int(second["resourceVersion"]) >= int(seen)
        assert second["resourceVersionMatch"] == "NotOlderThan"
        assert emu.count("list") == 0
    finally:
        await r.stop()


async def test_one_streaming_list_per_namespace(emu, session):
    populate(emu, 40)
    stores: dict[str | None, Store] = {}
    api = KubeApi(session, from_url(emu.url), typed=True)  # type: ignore[arg-type]
    src = KubeSource(api, lambda ns: stores.setdefault(ns, Store()), KubeMetrics(Registry()),
                     namespaces=["a", "b"], watch_list="auto")
    await src.start()
    try:
        await until(lambda: src.synced)
        for ns in ("a", "b"):
            assert stores[ns].versions() == server_state(emu, ns)
        assert {q.path.split("/")[5] for q in emu.request_log if q.kind == "watch"} == {"a", "b"}
        assert emu.count("list") == 0
    finally:
        await src.stop()


# -- the server refuses it -----------------------------------------------------------------------


@pytest.mark.parametrize("code", [400, 422])
async def test_a_refused_streaming_list_falls_back_to_paginated_lists(emu, session, caplog, code):
    """An API server without the streaming list refuses its parameters: kube 1.19-1.26 answer
    422 (resourceVersionMatch is forbidden for watch), others and proxies 400."""
    caplog.set_level(logging.WARNING, logger="exporter.sources.kube.reflector")
    populate(emu, 25)
    emu.faults.status(code, on="watch")
    store, registry = Store(), Registry()
    r = await synced(reflector(emu, session, store, registry, watch_timeout=1, watch_jitter=0))
    try:
        assert store.versions() == server_state(emu)
        assert r.list_mode == "paginated" and modes(registry) == {"watch-list": 0,
                                                                  "paginated": 1}
        assert len(streaming_watches(emu)) == 1 and emu.count("list") == 3
        assert relists(registry) == {"initial": 1}  # one sync, whatever it fell back to
        assert any("refused the streaming list" in rec.getMessage() for rec in caplog.records)
        # A refusal costs one small answer: the next sync asks again, and streams.
        emu.faults.expire_watch()
        await until(lambda: relists(registry)["expired"] == 1)
        await until(lambda: r.synced and r.list_mode == "watch-list")
        assert modes(registry) == {"watch-list": 1, "paginated": 0}
        assert emu.count("list") == 3 and store.versions() == server_state(emu)
    finally:
        await r.stop()


async def test_on_never_lists_and_off_never_streams(emu, session):
    populate(emu, 12)
    emu.faults.status(400, on="watch")
    on = await synced(reflector(emu, session, Store(), watch_list="on", attention_delay=0.01))
    # the 400 retried (as any refused request), never listed instead
    assert on.list_mode == "watch-list" and len(streaming_watches(emu)) == 2
    assert emu.count("list") == 0
    off_store = Store()
    off = await synced(reflector(emu, session, off_store, watch_list="off"))
    try:
        assert off.list_mode == "paginated" and emu.count("list") == 2
        assert off_store.versions() == server_state(emu)
    finally:
        await on.stop()
        await off.stop()


# -- the server ignores it -----------------------------------------------------------------------


async def test_an_ignored_streaming_list_falls_back_at_its_first_plain_bookmark(old_emu, session,
                                                                             caplog):
    caplog.set_level(logging.WARNING, logger="exporter.sources.kube.reflector")
    emu = old_emu
    populate(emu, 40)
    store, registry = Store(), Registry()
    r = await synced(reflector(emu, session, store, registry, watch_timeout=1, watch_jitter=0))
    try:
        assert store.versions() == server_state(emu)
        assert r.list_mode == "paginated" and modes(registry)["paginated"] == 1
        assert r.support.ignored == "a bookmark without the initial-events-end annotation"
        assert len(streaming_watches(emu)) == 1 and emu.count("list") == 4
        (line,) = [rec for rec in caplog.records if "ignores the streaming list" in
                   rec.getMessage()]
        assert line.reason == r.support.ignored  # type: ignore[attr-defined]
        # Known to ignore it: later syncs list at once, without another stream of ADDED.
        emu.faults.expire_watch()
        emu.delete("a", "us-001")
        await until(lambda: store.calls["list_done"] == 2)  # the relist is done
        assert relists(registry)["expired"] == 1 and store.versions() == server_state(emu)
        assert len(streaming_watches(emu)) == 1 and emu.count("list") == 8
    finally:
        await r.stop()


async def test_an_ignored_streaming_list_falls_back_when_the_initial_events_stop(session):
    """No bookmark for minutes (an old server sends them near the watch's end): the initial
    events stopping for `watch_list_wait` seconds is the sign."""
    emu = Old(seed=1, bookmark_interval_s=600)
    await emu.start()
    populate(emu, 40)
    store = Store()
    try:
        r = await synced(reflector(emu, session, store, watch_list_wait=0.2))
        try:
            assert r.list_mode == "paginated" and store.versions() == server_state(emu)
            assert r.support.ignored is not None and "no event for 0.2 s" in r.support.ignored
            assert emu.count("list") == 4
        finally:
            await r.stop()
    finally:
        await emu.stop()


async def test_a_change_before_the_initial_events_end_means_ignored(old_emu, session):
    """A server that ignores sendInitialEvents resumes from the version given: its first event
    is a change (MODIFIED), never a synthetic ADDED of the state."""
    emu = old_emu
    populate(emu, 20)
    store = Store()
    r = await synced(reflector(emu, session, store, watch_list="off"))
    rv = r.resource_version
    await r.stop()
    emu.update_spec("a", "us-001", spec("u1", 5))
    again = reflector(emu, session, store)
    again._stream_from = rv  # resuming where the first left off
    await synced(again)
    try:
        assert again.support.ignored == "a MODIFIED event before the initial-events-end bookmark"
        assert again.list_mode == "paginated" and store.versions() == server_state(emu)
    finally:
        await again.stop()


async def test_on_against_a_server_that_ignores_it_complains_and_never_lists(old_emu, session,
                                                                           caplog):
    caplog.set_level(logging.ERROR, logger="exporter.sources.kube.reflector")
    emu = old_emu
    populate(emu, 5)
    r = reflector(emu, session, Store(), watch_list="on")
    r.start()
    try:
        await until(lambda: len(streaming_watches(emu)) >= 2)
        assert not r.synced and emu.count("list") == 0 and r.support.ignored is None
        assert any("ignores the streaming list" in rec.getMessage() for rec in caplog.records)
    finally:
        await r.stop()


def test_the_annotation_is_metav1s() -> None:
    """The exporter and the emulator each name it; both must be metav1's
    (InitialEventsAnnotationKey), or they would agree with each other and no API server."""
    from zaroz_sim.kube import watch

    assert INITIAL_EVENTS_END == watch.INITIAL_EVENTS_END == "k8s.io/initial-events-end"


async def test_a_stream_cut_before_its_end_restarts_the_sync_and_loses_nothing(emu, session):
    populate(emu, 250)
    emu.faults.cut_watch(after_events=120)  # mid-way through the initial events
    store, registry = Store(), Registry()
    r = await synced(reflector(emu, session, store, registry))
    try:
        assert store.versions() == server_state(emu) and r.list_mode == "watch-list"
        assert store.calls["list_done"] == 1 and emu.count("list") == 0
        assert len(streaming_watches(emu)) == 2 and relists(registry) == {"initial": 1}
    finally:
        await r.stop()


async def test_the_collector_is_paused_through_the_initial_events_only(emu, session):
    import gc

    populate(emu, 250)
    paused: list[bool] = []

    class Watching(Store):
        def list_page(self, objects: list[Any], now: float) -> None:
            paused.append(not gc.isenabled())
            return super().list_page(objects, now)

    r = await synced(reflector(emu, session, Watching()))
    try:
        assert paused and all(paused)
        assert gc.isenabled()
    finally:
        await r.stop()
    await asyncio.sleep(0)


@pytest.mark.parametrize(("flag", "mode"), [([], "watch-list"), (["--kube-watch-list", "off"],
                                                                  "paginated")])
async def test_serve_says_which_it_uses(emu, flag, mode):
    """`serve` streams by default (auto) and says so in /metrics; off lists paginated."""
    from exporter.cli import build_parser
    from exporter.commands.config import ServeConfig
    from exporter.commands.serve import start
    from tests.simlogs import parse

    populate(emu, 30)
    args = build_parser().parse_args(["serve", "--listen", "127.0.0.1:0", "--kube", "on",
                                      "--kube-api-url", str(emu.url), *flag])
    running = await start(ServeConfig.from_args(args))
    try:
        await until(running.ready, timeout=10)
        async with aiohttp.ClientSession() as s, s.get(f"{running.url}/metrics") as r:
            samples = parse(await r.text())
    finally:
        await running.stop()
    got = {dict(labels)["mode"]: v for (m, labels), v in samples.items()
           if m == "zaroz_kube_list_mode"}
    assert got == {mode: 1, ({"watch-list", "paginated"} - {mode}).pop(): 0}
    assert (emu.count("list") == 0) is (mode == "watch-list")


async def test_a_stream_that_ends_cleanly_mid_way_streams_again_not_paginated(session):
    """An API server restarting gracefully, or a proxy closing the watch, ends the stream at a
    line boundary mid-way through the initial events: a clean end, no error. The server was
    streaming, so it does not ignore the streaming list: the sync starts over, streaming again
    (found by review: it turned paginated LISTs on for the whole process)."""
    cut = [True]

    class Closing(KubeEmulator):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)

            @web.middleware
            async def closing(request: web.Request, handler: Any) -> web.StreamResponse:
                if cut[0] and request.query.get("sendInitialEvents") == "true":
                    cut[0] = False
                    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
                    await resp.prepare(request)
                    for name in ("us-000", "us-001"):
                        obj = self.store.objects[f"b/{name}" if name.endswith("0") else
                                                 f"a/{name}"]
                        await resp.write(orjson.dumps({"type": "ADDED", "object": obj}) + b"\n")
                    await resp.write_eof()
                    return resp
                return await handler(request)  # type: ignore[no-any-return]

            self.app.middlewares.append(closing)

    e = Closing(seed=1, bookmark_interval_s=0.05)
    await e.start()
    try:
        populate(e, 30)
        store, registry = Store(), Registry()
        r = await synced(reflector(e, session, store, registry))
        try:
            assert not cut[0]  # the clean end was served
            assert store.versions() == server_state(e) and r.list_mode == "watch-list"
            assert e.count("list") == 0 and len(streaming_watches(e)) == 1  # + the cut one
        finally:
            await r.stop()
    finally:
        await e.stop()
