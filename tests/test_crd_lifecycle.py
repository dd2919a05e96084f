"""A UnitSignal CRD that comes and goes, against the emulated API server and the real `serve`:
absent at start, installed later, deleted, installed again. /metrics answers throughout, /readyz
says why it is not ready, a deleted CRD's objects leave the exposition and return with it."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.serve import Running, start
from tests.unitsignals import status as full_status
from tests.waiting import until
from zaroz_sim.kube.emulator import KubeEmulator
from zaroz_sim.kube.store import KubeError

WL = {"units.zaroz.cloud/workload": "wl-1"}


def spec(key: str) -> dict:
    return {"unitId": f"unit-{key}", "key": key, "contractVersion": 1, "generation": 1,
            "userData": {}, "allocation": None, "draining": False}


class Probe:
    """What an operator's Prometheus and kubelet see of the exporter, over HTTP."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session, self.url = session, url
        self.metrics_codes: list[int] = []

    async def readyz(self) -> tuple[int, str]:
        async with self.session.get(f"{self.url}/readyz") as r:
            return r.status, await r.text()

    async def signals(self) -> set[str]:
        """UnitSignal names on zaroz_unitsignal_info; every /metrics answer's code is kept."""
        async with self.session.get(f"{self.url}/metrics") as r:
            self.metrics_codes.append(r.status)
            text = await r.text()
        return {s.labels["unitsignal"] for fam in text_string_to_metric_families(text)
                for s in fam.samples if s.name == "zaroz_unitsignal_info"}

    async def wait_signals(self, want: set[str], timeout: float = 10.0) -> None:
        last: list[set[str]] = [set()]

        async def check() -> bool:
            last[0] = await self.signals()
            return last[0] == want

        deadline = time.monotonic() + timeout
        while not await check():
            if time.monotonic() > deadline:
                raise AssertionError(f"unitsignals {sorted(last[0])} != {sorted(want)}")
            await asyncio.sleep(0.05)


@pytest.fixture
async def emu():
    e = KubeEmulator(seed=5, bookmark_interval_s=0.2, crd_installed=False)
    await e.start()
    yield e
    await e.stop()


async def _serve(emu: KubeEmulator) -> Running:
    args = build_parser().parse_args([
        "serve", "--listen", "127.0.0.1:0", "--kube", "on", "--kube-api-url", str(emu.url),
        "--backoff-max", "0.2"])
    return await start(ServeConfig.from_args(args))


async def test_crd_absent_then_installed_then_deleted_then_installed_again(emu):
    running = await _serve(emu)
    try:
        async with aiohttp.ClientSession() as session:
            probe = Probe(session, running.url)
            # 1. absent: the exporter runs, /metrics answers, /readyz says why it is not ready
            await until(lambda: emu.count("list") >= 3, timeout=10)
            code, text = await probe.readyz()
            assert code == 503 and "HTTP 404" in text and "CRD installed" in text, text
            assert await probe.signals() == set()
            with pytest.raises(KubeError):  # nothing can be written while it is absent
                emu.create("ns-a", "early", spec("early"), labels=WL)

            # 2. installed: picked up by the next try (backoff <= 0.2 s), no restart
            emu.install_crd()
            emu.create("ns-a", "u1", spec("u1"), labels=WL, status=full_status())
            emu.create("ns-b", "u2", spec("u2"), labels=WL)
            await probe.wait_signals({"u1", "u2"})
            code, text = await probe.readyz()
            assert code == 200, text
            emu.create("ns-a", "u3", spec("u3"), labels=WL)  # through the watch
            await probe.wait_signals({"u1", "u2", "u3"})

            # 3. deleted: every object leaves the exposition, readiness says why
            emu.uninstall_crd()
            await probe.wait_signals(set())
            await until(lambda: not running.ready(), timeout=10)
            code, text = await probe.readyz()
            assert code == 503 and "HTTP 404" in text, text

            # 4. installed again, with other objects: they appear, the old ones do not return
            emu.install_crd()
            emu.create("ns-a", "v1", spec("v1"), labels=WL, status=full_status())
            await probe.wait_signals({"v1"})
            code, text = await probe.readyz()
            assert code == 200, text
            emu.create("ns-c", "v2", spec("v2"), labels=WL)
            await probe.wait_signals({"v1", "v2"})
        assert probe.metrics_codes and set(probe.metrics_codes) == {200}
    finally:
        await running.stop()


async def test_objects_of_a_crd_deleted_while_the_watch_was_down_leave(emu):
    """No DELETED event reaches the exporter: the 404 on its relist alone must clear them."""
    emu.install_crd()
    for i in range(5):
        emu.create("ns-a", f"u{i}", spec(f"u{i}"), labels=WL)
    running = await _serve(emu)
    try:
        async with aiohttp.ClientSession() as session:
            probe = Probe(session, running.url)
            await probe.wait_signals({f"u{i}" for i in range(5)})
            await running.kube.stop()  # the watch is down...
            emu.uninstall_crd()  # ...while the CRD and its objects go
            await running.kube.start()
            await probe.wait_signals(set())
            code, text = await probe.readyz()
            assert code == 503 and "CRD installed" in text, text
            requests = running.pipeline.registry["zaroz_kube_requests_total"].series
            assert sum(s.value for k, s in requests.items()  # type: ignore[union-attr]
                       if k[2] == "404") >= 1
    finally:
        await running.stop()
