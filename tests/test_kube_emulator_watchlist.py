"""The streaming list (watch-list: sendInitialEvents=true, resourceVersionMatch=NotOlderThan) and
kube's ListOptions validation, as kube-apiserver 1.32 serves them: ADDED events for the state,
one BOOKMARK annotated k8s.io/initial-events-end, then the watch; 422 for wrong combinations."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from zaroz_sim.kube.emulator import KubeEmulator

API = "/apis/units.zaroz.cloud/v1"
ALL = f"{API}/unitsignals"
STREAM = {"watch": "true", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
          "allowWatchBookmarks": "true"}
END = "k8s.io/initial-events-end"


def spec(i: int) -> dict[str, Any]:
    return {"unitId": f"unit-{i}", "key": f"k{i}", "contractVersion": 1, "generation": 1}


class Stream:
    """A watch being read line by line (each next() waits at most `wait` seconds)."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    async def next(self, wait: float = 5.0) -> dict[str, Any]:
        line = await asyncio.wait_for(self.resp.content.readline(), wait)
        assert line, "the stream ended"
        event: dict[str, Any] = orjson.loads(line)
        return event

    async def until_bookmark(self) -> list[dict[str, Any]]:
        events = []
        while (event := await self.next())["type"] != "BOOKMARK":
            events.append(event)
        return [*events, event]


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    e = KubeEmulator(seed=2, bookmark_interval_s=30.0, too_large_wait_s=0.1)
    for i in range(5):
        e.create(f"ns-{i % 2}", f"u{i}", spec(i))
    await e.start()
    yield e
    await e.stop()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_initial_state_then_the_end_bookmark_then_changes(
    emu: KubeEmulator, session: aiohttp.ClientSession
) -> None:
    rv = emu.resource_version
    async with session.get(emu.url + ALL, params=STREAM) as resp:
        assert resp.status == 200
        stream = Stream(resp)
        events = await stream.until_bookmark()
        *added, bookmark = events
        assert {e["type"] for e in added} == {"ADDED"}
        assert sorted(e["object"]["metadata"]["name"] for e in added) == [f"u{i}" for i in
                                                                            range(5)]
        assert bookmark["object"]["metadata"]["resourceVersion"] == str(rv)
        assert bookmark["object"]["metadata"]["annotations"] == {END: "true"}
        emu.patch_status("ns-0", "u0", {"seq": 1})
        event = await stream.next()
        assert (event["type"], event["object"]["metadata"]["resourceVersion"]) == (
            "MODIFIED", str(rv + 1))


async def test_state_is_what_the_store_holds_even_from_a_compacted_version(
    emu: KubeEmulator, session: aiohttp.ClientSession
) -> None:
    """NotOlderThan an old rv is the current state, not a 410: nothing is resumed."""
    old = emu.resource_version
    emu.delete("ns-1", "u1")
    emu.compact()
    async with session.get(emu.url + f"{API}/namespaces/ns-0/unitsignals",
                           params=STREAM | {"resourceVersion": str(old)}) as resp:
        events = await Stream(resp).until_bookmark()
    assert [e["object"]["metadata"]["name"] for e in events[:-1]] == ["u0", "u2", "u4"]
    assert events[-1]["object"]["metadata"]["resourceVersion"] == str(emu.resource_version)


async def test_without_bookmarks_no_end_marker_and_false_sends_no_state(
    emu: KubeEmulator, session: aiohttp.ClientSession
) -> None:
    no_bookmarks = STREAM | {"allowWatchBookmarks": "false"}
    async with session.get(emu.url + ALL, params=no_bookmarks) as resp:
        stream = Stream(resp)
        types = [(await stream.next())["type"] for _ in range(5)]
        emu.patch_status("ns-0", "u0", {"seq": 7})
        assert types == ["ADDED"] * 5 and (await stream.next())["type"] == "MODIFIED"
    async with session.get(emu.url + ALL, params=STREAM | {"sendInitialEvents": "false"}) as resp:
        stream = Stream(resp)
        await asyncio.sleep(0.05)
        emu.patch_status("ns-0", "u2", {"seq": 8})
        event = await stream.next()
        assert (event["type"], event["object"]["metadata"]["name"]) == ("MODIFIED", "u2")


@pytest.mark.parametrize(("params", "field"), [
    ({"watch": "1", "sendInitialEvents": "true"}, "resourceVersionMatch"),
    (STREAM | {"resourceVersionMatch": "Exact"}, "resourceVersionMatch"),
    ({"watch": "1", "resourceVersionMatch": "NotOlderThan"}, "resourceVersionMatch"),
    ({"sendInitialEvents": "true"}, "sendInitialEvents"),  # a list
    ({"resourceVersionMatch": "NotOlderThan"}, "resourceVersionMatch"),  # a list without rv
])
async def test_wrong_combinations_are_422_as_kube(
    emu: KubeEmulator, session: aiohttp.ClientSession, params: dict[str, str], field: str
) -> None:
    async with session.get(emu.url + ALL, params=params) as resp:
        body = await resp.json()
    assert resp.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["kind"] == "ListOptions" and body["details"]["group"] == "meta.k8s.io"
    assert field in {c["field"] for c in body["details"]["causes"]}
    assert body["message"].startswith('ListOptions.meta.k8s.io "" is invalid: ')


async def test_a_future_resource_version_is_504(
    emu: KubeEmulator, session: aiohttp.ClientSession
) -> None:
    params = STREAM | {"resourceVersion": str(emu.resource_version + 10)}
    async with session.get(emu.url + ALL, params=params) as resp:
        body = await resp.json()
    assert resp.status == 504
    assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


@pytest.mark.parametrize(("value", "is_watch"), [
    ("yes", True), ("true", True), ("1", True), ("", True), ("false", False), ("0", False),
    ("FALSE", False),
])
async def test_watch_parameter_reads_as_apimachinery_reads_booleans(
    emu: KubeEmulator, session: aiohttp.ClientSession, value: str, is_watch: bool
) -> None:
    async with session.get(emu.url + ALL, params={"watch": value, "timeoutSeconds": "1"}) as resp:
        assert resp.status == 200
        if is_watch:
            first = orjson.loads(await asyncio.wait_for(resp.content.readline(), 5))
            assert first["type"] == "ADDED"
        else:
            body = await resp.json()
            assert body["kind"] == "UnitSignalList" and len(body["items"]) == 5
