"""The Kubernetes emulator's WATCH follows kube-apiserver, and its scripted faults behave."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from zaroz_sim.kube.emulator import KubeEmulator, KubeError

from .test_sim_kube import ALL, API, AUTH, TOKEN, Client, spec

NS = f"{API}/namespaces/ns/unitsignals"


class Watch:
    """One raw watch stream: decoded events, the raw tail, and how it ended."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.error: Exception | None = None
        self.status = 0
        self.elapsed = 0.0

    @property
    def types(self) -> list[str]:
        return [e["type"] for e in self.events if e["type"] != "BOOKMARK"]

    @property
    def changes(self) -> list[tuple[str, str, str]]:
        return [
            (e["type"], e["object"]["metadata"]["name"], e["object"]["metadata"]["resourceVersion"])
            for e in self.events
            if e["type"] != "BOOKMARK"
        ]


async def watch(
    session: aiohttp.ClientSession,
    url: str,
    *,
    stop_after: int | None = None,
    max_s: float = 3.0,
    **params: Any,
) -> Watch:
    """Read a watch until EOF, error, `stop_after` non-bookmark events or `max_s`."""
    out = Watch()
    query = {"watch": "1"} | {k: str(v) for k, v in params.items()}
    t0 = time.monotonic()
    try:
        async with session.get(url, params=query, headers=AUTH) as resp:
            out.status = resp.status
            assert resp.headers["Content-Type"].startswith("application/json")
            while True:
                line = await asyncio.wait_for(resp.content.readline(), max_s)
                if not line:
                    break
                out.raw.append(line)
                out.events.append(orjson.loads(line))
                if stop_after is not None and len(out.types) >= stop_after:
                    break
    except (aiohttp.ClientError, orjson.JSONDecodeError, TimeoutError) as exc:
        out.error = exc
    out.elapsed = time.monotonic() - t0
    return out


async def opened(emu: KubeEmulator, before: frozenset[object] = frozenset()) -> None:
    """Until a watch not in `before` is open on the emulator: a fixed pause may end before the
    request is served on a busy machine, and a change made then would not be a live event."""
    deadline = time.monotonic() + 10
    while not set(emu.watches) - before:
        assert time.monotonic() < deadline, "the watch never opened"
        await asyncio.sleep(0.005)


@pytest.fixture
async def kube() -> AsyncIterator[tuple[KubeEmulator, aiohttp.ClientSession, str]]:
    emu = KubeEmulator(
        token=TOKEN,
        seed=7,
        history=20,
        bookmark_interval_s=0.2,
        watch_timeout_s=(0.6, 0.8),
        too_large_wait_s=0.1,
    )
    base = await emu.start()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        yield emu, session, base
    await emu.stop()


def seed(emu: KubeEmulator, n: int = 3) -> int:
    for i in range(n):
        emu.create("ns", f"u{i}", spec(i), labels={"tier": "a"}, status={"seq": 0})
    return emu.resource_version


async def test_watch_from_rv_gets_exactly_the_later_events(
    kube: tuple[KubeEmulator, aiohttp.ClientSession, str],
) -> None:
    emu, session, base = kube
    rv = seed(emu)
    emu.patch_status("ns", "u1", {"seq": 1})  # before the watch connects: replayed from history
    task = asyncio.create_task(watch(session, base + ALL, resourceVersion=rv, stop_after=5))
    await opened(emu)
    emu.update_spec("ns", "u2", spec(2, generation=2))
    emu.update_spec("ns", "u2", spec(2, generation=2))  # no-op: no event
    emu.delete("ns", "u0")
    emu.create("ns", "u3", spec(3))
    emu.create("other", "x", spec(4))
    w = await task
    assert w.status == 200 and w.error is None
    assert w.changes == [
        ("MODIFIED", "u1", str(rv + 1)),
        ("MODIFIED", "u2", str(rv + 2)),
        ("DELETED", "u0", str(rv + 3)),
        ("ADDED", "u3", str(rv + 4)),
        ("ADDED", "x", str(rv + 5)),
    ]
    assert w.events[0]["object"]["status"]["seq"] == 1
    assert w.events[1]["object"]["metadata"]["generation"] == 2
    deleted = w.events[2]["object"]  # DELETED carries the last state
    assert deleted["spec"] == spec(0) and deleted["status"] == {"seq": 0}
    assert "deletionTimestamp" not in deleted["metadata"]

    ns_only = await watch(session, base + NS, resourceVersion=rv, timeoutSeconds=1, stop_after=4)
    assert [c[1] for c in ns_only.changes] == ["u1", "u2", "u0", "u3"]
    current = await watch(
        session, base + NS, resourceVersion=emu.resource_version, timeoutSeconds=1
    )
    assert current.types == [] and current.error is None  # nothing new: no ADDED storm


async def test_watch_without_rv_starts_with_added_for_all(
    kube: tuple[KubeEmulator, aiohttp.ClientSession, str],
) -> None:
    emu, session, base = kube
    seed(emu)
    emu.create("other", "x", spec(9))
    for params in ({}, {"resourceVersion": "0"}):
        before = frozenset(emu.watches)
        task = asyncio.create_task(watch(session, base + NS, stop_after=4, **params))
        await opened(emu, before)
        emu.patch_status("ns", "u1", {"seq": len(emu.store.history)})
        w = await task
        assert w.types == ["ADDED", "ADDED", "ADDED", "MODIFIED"]
        assert [c[1] for c in w.changes] == ["u0", "u1", "u2", "u1"]
    assert emu.count("watch") == 2 and emu.count("watch", {"resourceVersion": "0"}) == 1


async def test_bookmarks_and_timeouts(
    kube: tuple[KubeEmulator, aiohttp.ClientSession, str],
) -> None:
    emu, session, base = kube
    rv = seed(emu)
    w = await watch(
        session, base + ALL, resourceVersion=rv, allowWatchBookmarks="true", timeoutSeconds=1
    )
    assert w.error is None and 0.9 < w.elapsed < 1.6  # timeoutSeconds ends the stream cleanly
    marks = [e for e in w.events if e["type"] == "BOOKMARK"]
    assert len(marks) >= 3 and w.types == []
    assert marks[0]["object"] == {
        "kind": "UnitSignal",
        "apiVersion": "units.zaroz.cloud/v1",
        "metadata": {"resourceVersion": str(rv)},
    }

    task = asyncio.create_task(
        watch(session, base + ALL, resourceVersion=rv, allowWatchBookmarks="1", timeoutSeconds=1)
    )
    await asyncio.sleep(0.3)
    emu.patch_status("ns", "u0", {"seq": 5})
    w = await task
    last = [e for e in w.events if e["type"] == "BOOKMARK"][-1]
    assert last["object"]["metadata"]["resourceVersion"] == str(rv + 1)

    w = await watch(session, base + ALL, resourceVersion=rv + 1)  # default timeout: 0.6-0.8 s
    assert w.error is None and w.events == [] and 0.5 < w.elapsed < 1.2


async def test_too_old_resource_version_is_an_error_event(
    kube: tuple[KubeEmulator, aiohttp.ClientSession, str],
) -> None:
    emu, session, base = kube
    rv = seed(emu)
    for n in range(25):  # history keeps 20 events
        emu.patch_status("ns", "u0", {"seq": n + 1})
    w = await watch(session, base + ALL, resourceVersion=rv, timeoutSeconds=5)
    assert w.status == 200 and w.error is None and w.elapsed < 1
    [event] = w.events
    assert event["type"] == "ERROR"
    status = event["object"]
    assert status["kind"] == "Status" and status["apiVersion"] == "v1"
    assert (status["status"], status["reason"], status["code"]) == ("Failure", "Expired", 410)
    assert status["message"].startswith(f"too old resource version: {rv} (")
    ok = await watch(
        session,
        base + ALL,
        resourceVersion=emu.resource_version - 20,
        timeoutSeconds=1,
        stop_after=20,
    )
    assert len(ok.types) == 20
    emu.compact()
    w = await watch(session, base + ALL, resourceVersion=emu.resource_version - 1)
    assert [e["type"] for e in w.events] == ["ERROR"]
    w = await watch(session, base + ALL, resourceVersion=emu.resource_version, timeoutSeconds=1)
    assert w.events == [] and w.error is None
    w = await watch(session, base + ALL, resourceVersion=emu.resource_version + 10)
    assert w.status == 504


async def test_label_selector_watch_turns_transitions_into_added_and_deleted(
    kube: tuple[KubeEmulator, aiohttp.ClientSession, str],
) -> None:
    emu, session, base = kube
    rv = seed(emu, 2)
    emu.set_labels("ns", "u0", {"tier": "b"})  # leaves the selection
    emu.patch_status("ns", "u0", {"seq": 3})  # invisible
    emu.set_labels("ns", "u0", {"tier": "a"})  # comes back
    emu.patch_status("ns", "u1", {"seq": 4})
    w = await watch(session, base + ALL, resourceVersion=rv, labelSelector="tier=a", stop_after=3)
    assert w.changes == [
        ("DELETED", "u0", str(rv + 1)),
        ("ADDED", "u0", str(rv + 3)),
        ("MODIFIED", "u1", str(rv + 4)),
    ]
    assert w.events[0]["object"]["metadata"]["labels"] == {"tier": "a"}  # the old state


# -- faults ------------------------------------------------------------------------------------


async def test_status_faults(kube: tuple[KubeEmulator, aiohttp.ClientSession, str]) -> None:
    emu, session, base = kube
    seed(emu)
    client = Client(base, session)
    emu.faults.status(429, retry_after=2, on="list")
    emu.faults.status(500, on="watch")
    emu.faults.status(503, on="get", times=2)
    status, body, headers = await client.get(ALL)
    assert status == 429 and headers["Retry-After"] == "2"
    assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 2
    assert (await client.get(ALL))[0] == 200
    w = await watch(session, base + ALL, resourceVersion=1)
    assert w.status == 500
    for _ in range(2):
        status, body, _ = await client.get(f"{NS}/u0")
        assert status == 503 and body["reason"] == "ServiceUnavailable"
    assert (await client.get(f"{NS}/u0"))[0] == 200
    assert [a[1] for a in emu.faults.applied] == ["status"] * 4 and not emu.faults.pending


async def test_dropped_connections(kube: tuple[KubeEmulator, aiohttp.ClientSession, str]) -> None:
    emu, _, base = kube
    seed(emu)
    emu.faults.drop(on="list", times=2)
    async with aiohttp.ClientSession() as session:  # pooled: aiohttp retries a drop once
        with pytest.raises(aiohttp.ClientConnectionError):
            await Client(base, session).get(ALL)
        assert emu.requests["list"] == 2
        assert (await Client(base, session).get(ALL))[0] == 200
    emu.faults.drop(on="watch", times=2)  # aiohttp retries once even without pooling
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        w = await watch(s, base + ALL)
    assert isinstance(w.error, aiohttp.ClientConnectionError) and w.status == 0
    assert emu.requests["watch"] == 2 and not emu.faults.pending


async def test_watch_cut_and_truncated(
    kube: tuple[KubeEmulator, aiohttp.ClientSession, str],
) -> None:
    emu, session, base = kube
    seed(emu, 5)
    emu.faults.cut_watch(after_events=2)
    w = await watch(session, base + ALL, timeoutSeconds=5)
    assert w.types == ["ADDED", "ADDED"] and w.elapsed < 1
    assert isinstance(w.error, aiohttp.ClientPayloadError)  # no terminating chunk

    emu.faults.truncate(after_events=3)
    w = await watch(session, base + ALL, timeoutSeconds=5)
    assert w.types == ["ADDED"] * 3 and w.error is not None and w.elapsed < 1
    assert all(line.endswith(b"\n") for line in w.raw)

    emu.faults.truncate(on="list")
    with pytest.raises(aiohttp.ClientPayloadError):
        await Client(base, session).get(ALL)
    assert emu.faults.applied == [("watch", "cut"), ("watch", "truncate"), ("list", "truncate")]


async def test_forced_expiry_compaction_and_slow(
    kube: tuple[KubeEmulator, aiohttp.ClientSession, str],
) -> None:
    emu, session, base = kube
    rv = seed(emu)
    emu.faults.expire_watch()
    w = await watch(session, base + ALL, resourceVersion=rv)
    assert [e["type"] for e in w.events] == ["ERROR"] and w.events[0]["object"]["code"] == 410

    emu.patch_status("ns", "u0", {"seq": 1})
    emu.faults.compact()
    w = await watch(session, base + ALL, resourceVersion=rv)
    assert [e["type"] for e in w.events] == ["ERROR"]
    assert emu.store.floor == emu.resource_version

    emu.faults.slow(0.4, between_s=0.1, on="watch")
    w = await watch(session, base + ALL, timeoutSeconds=2, stop_after=3)
    assert w.types == ["ADDED"] * 3 and 0.65 < w.elapsed < 1.5
    emu.faults.slow(0.3, between_s=0.05, on="list")
    t0 = time.monotonic()
    status, body, _ = await Client(base, session).get(ALL)
    assert status == 200 and len(body["items"]) == 3 and time.monotonic() - t0 > 0.45
    assert emu.count("list") == 1 and emu.count("watch") == 3


async def test_stop_ends_open_watches(
    kube: tuple[KubeEmulator, aiohttp.ClientSession, str],
) -> None:
    emu, session, base = kube
    task = asyncio.create_task(watch(session, base + ALL, timeoutSeconds=30))
    await opened(emu)
    assert len(emu.watches) == 1
    await emu.stop()
    w = await asyncio.wait_for(task, 2)
    assert w.elapsed < 2 and not emu.watches and not emu.store.listeners


async def test_a_deleted_crd_deletes_its_objects_ends_watches_and_answers_404(
    kube: tuple[KubeEmulator, aiohttp.ClientSession, str],
) -> None:
    emu, session, base = kube
    rv = seed(emu)
    task = asyncio.create_task(watch(session, base + ALL, resourceVersion=rv, timeoutSeconds=30))
    await opened(emu)
    emu.uninstall_crd()
    w = await asyncio.wait_for(task, 2)  # the finalizer's deletes, then the stream ends
    assert w.changes == [("DELETED", f"u{i}", str(rv + 1 + i)) for i in range(3)]
    assert w.elapsed < 2 and not emu.watches
    client = Client(base, session)
    for path in (API, ALL, NS, f"{NS}/u0"):
        status, body, _ = await client.get(path)
        assert status == 404 and body["reason"] == "NotFound", path
    gone = await watch(session, base + ALL, resourceVersion=emu.resource_version)
    assert gone.status == 404
    with pytest.raises(KubeError):
        emu.create("ns", "x", spec(9))
    emu.install_crd()  # again: empty, served, and its watch cache starts now
    status, body, _ = await client.get(ALL)
    assert status == 200 and body["items"] == []
    old = await watch(session, base + ALL, resourceVersion=rv, timeoutSeconds=1)
    assert old.events and old.events[0]["type"] == "ERROR"
    assert old.events[0]["object"]["code"] == 410
    emu.create("ns", "x", spec(9))
    status, body, _ = await client.get(ALL)
    assert [o["metadata"]["name"] for o in body["items"]] == ["x"]
