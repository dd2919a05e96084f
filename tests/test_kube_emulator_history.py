"""History by time, as kube's watch cache and etcd compaction keep it: a resourceVersion or a
continue token stays valid for at least 5 minutes whatever the write rate, then answers 410
(an expired continue token offers a -1 continuation); a length bound caps the memory; a watch
without timeoutSeconds lasts kube's 30-60 minutes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from zaroz_sim.kube.emulator import KubeEmulator, decode_continue

ALL = "/apis/units.zaroz.cloud/v1/unitsignals"


def spec(i: int) -> dict[str, Any]:
    return {"unitId": f"unit-{i}", "key": f"k{i}", "contractVersion": 1, "generation": 1}


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def mono() -> Monotonic:
    return Monotonic()


async def served(emu: KubeEmulator) -> AsyncIterator[aiohttp.ClientSession]:
    await emu.start()
    async with aiohttp.ClientSession() as session:
        yield session
    await emu.stop()


async def _get(session: aiohttp.ClientSession, url: str, **query: str) -> tuple[int, Any]:
    async with session.get(url, params=query) as r:
        return r.status, orjson.loads(await r.read())


async def test_a_continue_token_lives_five_minutes_whatever_the_write_rate(
    mono: Monotonic,
) -> None:
    emu = KubeEmulator(seed=1, history_clock=mono)  # the defaults: the window and the bound
    for i in range(6):
        emu.create("ns", f"u{i}", spec(i))
    async for session in served(emu):
        code, page = await _get(session, emu.url + ALL, limit="2")
        token = page["metadata"]["continue"]
        mono.now += 1
        for n in range(20_000):  # ~7 s of the old 1,000-event history at 130 writes a second
            emu.patch_status("ns", "u0", {"seq": n})
        mono.now += 298  # 299 s after the first write that followed the list
        code, body = await _get(session, emu.url + ALL, limit="10", **{"continue": token})
        assert code == 200 and [o["metadata"]["name"] for o in body["items"]] == [
            "u2", "u3", "u4", "u5"]
        assert body["metadata"]["resourceVersion"] == page["metadata"]["resourceVersion"]
        mono.now += 3  # now the write after the list is older than 300 s
        emu.patch_status("ns", "u1", {"seq": 1})
        code, body = await _get(session, emu.url + ALL, limit="10", **{"continue": token})
        assert code == 410 and body["reason"] == "Expired"
        assert decode_continue(body["metadata"]["continue"])[0] == -1


async def test_a_watch_resumes_within_the_window_and_gets_410_after(mono: Monotonic) -> None:
    emu = KubeEmulator(seed=1, history_clock=mono, history_s=60.0)
    emu.create("ns", "u0", spec(0))
    rv = emu.resource_version
    mono.now += 1
    emu.patch_status("ns", "u0", {"seq": 1})
    async for session in served(emu):
        mono.now += 58
        async with session.get(emu.url + ALL, params={"watch": "1", "resourceVersion": str(rv),
                                                      "timeoutSeconds": "1"}) as r:
            first = orjson.loads(await asyncio.wait_for(r.content.readline(), 5))
        assert first["type"] == "MODIFIED"
        assert first["object"]["metadata"]["resourceVersion"] == str(rv + 1)
        mono.now += 3  # no write since: reading expires the history by time too
        async with session.get(emu.url + ALL, params={"watch": "1", "resourceVersion": str(rv),
                                                      "timeoutSeconds": "1"}) as r:
            first = orjson.loads(await asyncio.wait_for(r.content.readline(), 5))
        assert first["type"] == "ERROR" and first["object"]["code"] == 410


def test_the_length_bound_caps_the_history(mono: Monotonic) -> None:
    emu = KubeEmulator(seed=1, history_clock=mono, history=100)
    emu.create("ns", "u0", spec(0))
    for n in range(250):
        emu.patch_status("ns", "u0", {"seq": n})
    assert len(emu.store.history) == 100
    assert emu.store.floor == emu.resource_version - 100
    assert emu.store.events_since(emu.store.floor)[0].rv == emu.store.floor + 1
    with pytest.raises(Exception, match="too old"):
        emu.store.events_since(emu.store.floor - 1)


async def test_a_watch_without_timeout_seconds_lasts_30_to_60_minutes() -> None:
    emu = KubeEmulator(seed=1)
    drawn: list[tuple[float, float]] = []
    uniform = emu.rng.uniform

    def spy(a: float, b: float) -> float:
        drawn.append((a, b))
        return uniform(a, b)

    emu.rng.uniform = spy  # type: ignore[method-assign]
    async for session in served(emu):
        async with session.get(emu.url + ALL, params={"watch": "1"}) as r:
            assert r.status == 200
            await asyncio.sleep(0.05)  # the stream is open; its deadline was drawn
    assert drawn == [(1800.0, 3600.0)]
