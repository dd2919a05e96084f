"""A scrape renders what changed ahead, in slices that yield to the loop (sinks/metrics/
pbprime.py), then the rest synchronously, right after its checkpoint: /healthz is answered in
the middle of a large render, and the exposition is still one moment, the one the checkpoint
saved. Asserted by order and progress, never by wall time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiohttp
import pytest

from exporter import catalog
from exporter.catalog import Kind, Metric
from exporter.model.unitsignals import SignalState
from exporter.sinks.metrics import pbprime
from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.unitsignals import UnitSignalMetrics
from exporter.web.app import MetricsServer, start_site
from exporter.wiring.events import Pipeline
from tests.test_protobuf import text_samples
from tests.waiting import until

BIG = "t_big_value"


def state(workload: str, lag: int) -> SignalState:
    return SignalState(
        workload=workload, unit_id=f"unit-{lag}", key="k", agent_version="1.0", labels=(),
        generation_lag=lag, pending_since=None, ready=lag % 2, accepting=1, activity="idle",
        draining="none", allocation_pending=0, status_seq=lag, spec_valid=1, status_valid=1,
        stuck_invalid_spec=0, phase="ready", phase_since=0.0)


def big_registry(rows: int, series: int) -> tuple[Registry, UnitSignalMetrics]:
    reg = Registry((*catalog.METRICS, Metric(BIG, Kind.GAUGE, "Big.", ("a",))), native=None)
    sink = UnitSignalMetrics(reg, clock=lambda: 100.0)
    for i in range(rows):
        sink.state(("ns", f"us-{i}"), None, state("w", 0))
    for i in range(series):
        reg.gauge(BIG).labels(f"a{i}").set(i)
    render_bytes(reg)
    return reg, sink


async def test_healthz_answers_while_a_large_text_scrape_renders(monkeypatch):
    monkeypatch.setattr(pbprime, "SLICE_CHUNKS", 20)
    reg, sink = big_registry(20_000, 0)
    for i in range(20_000):  # every row changed since the last scrape
        sink.state(("ns", f"us-{i}"), state("w", 0), state("w", i + 1))
    table = sink.rows
    assert table is not None
    dirty0 = len(table.dirty)
    assert dirty0 > 1000
    runner, url = await start_site(MetricsServer(reg).app, "127.0.0.1:0")
    try:
        async with aiohttp.ClientSession() as session:
            async def scrape() -> bytes:
                async with session.get(f"{url}/metrics") as r:
                    return await r.read()

            task = asyncio.create_task(scrape())
            await until(lambda: len(table.dirty) < dirty0, timeout=60, interval=0)
            assert table.dirty, "every chunk rendered in one go: the loop was held"
            async with session.get(f"{url}/healthz") as r:
                assert r.status == 200
            async with session.get(f"{url}/readyz") as r:
                assert r.status == 200
            # Answered while the render was still under way, and the scrape not sent yet.
            assert table.dirty and not task.done(), (len(table.dirty), dirty0)
            body = await task
        assert not table.dirty
        got = text_samples(body.decode())
        lags = {dict(k[1])["unitsignal"]: v for k, v in got.items()
                if k[0] == "zaroz_unitsignal_generation_lag"}
        assert lags == {f"us-{i}": i + 1 for i in range(20_000)}
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("changes", ["during", "none"])
def test_changes_between_text_slices_are_in_the_render(changes):
    """Series set, added and removed and rows changed between slices: the render after the
    priming shows the state at render time."""
    reg, sink = big_registry(300, 2000)
    fam = reg.gauge(BIG)
    want = {f"a{i}": float(i) for i in range(2000)}
    lags = {f"us-{i}": 0 for i in range(300)}
    for i in range(2000):
        fam.labels(f"a{i}").set(-i)
        want[f"a{i}"] = float(-i)
    for i in range(300):
        sink.state(("ns", f"us-{i}"), state("w", 0), state("w", i))
        lags[f"us-{i}"] = i
    steps = 0
    for _ in pbprime.prime_steps(reg, 37, 3, protobuf=False):
        steps += 1
        if changes == "during":
            fam.labels(f"a{steps}").set(steps * 10)  # one rendered already or still to come
            want[f"a{steps}"] = steps * 10.0
            fam.labels(f"new{steps}").set(steps)
            want[f"new{steps}"] = float(steps)
            if steps % 5 == 0:
                fam.remove(f"a{steps * 3}")
                want.pop(f"a{steps * 3}", None)
            key = f"us-{steps % 300}"
            sink.state(("ns", key), state("w", lags[key]), state("w", 1000 + steps))
            lags[key] = 1000 + steps
    assert steps > 20
    got = text_samples(render_bytes(reg).decode())
    assert {dict(k[1])["a"]: v for k, v in got.items() if k[0] == BIG} == want
    assert {dict(k[1])["unitsignal"]: v for k, v in got.items()
            if k[0] == "zaroz_unitsignal_generation_lag"} == lags


class Recording:
    """A checkpointer that keeps, at each save, what a checkpoint of that moment holds (here:
    the counts the pipeline has applied)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.saved: list[int] = []

    def save(self) -> bool:
        self.saved.append(self.pipeline.logs["w"].applied_through)
        return True

    async def take_ahead(self) -> None:
        """As Checkpointer.take_ahead with no whole save due: nothing to take ahead."""

    def begin_save(self) -> Callable[[], Awaitable[bool]]:
        """As Checkpointer.begin_save: taken now, durable after an await (events go on)."""
        self.save()

        async def durable() -> bool:
            await asyncio.sleep(0)
            return True

        return durable


def event(seq: int) -> dict:
    return {"seq": seq, "id": f"evt_{seq:032x}", "type": "unit.created", "contract_version": 1,
            "occurred_at": "2026-01-01T00:00:00Z", "service_instance_id": "p",
            "unit": {"id": f"u_{seq}", "key": "k", "labels": {}}, "data": {}}


async def test_a_scrape_is_the_moment_its_checkpoint_saved_while_events_arrive(monkeypatch):
    """Events are applied on every turn of the loop while scrapes render in slices (a table of
    changed rows to render ahead): each exposition shows exactly the events the checkpoint
    saved just before it, never one more."""
    monkeypatch.setattr(pbprime, "SLICE_CHUNKS", 5)
    pipeline = Pipeline(Registry(native=None))
    sink = UnitSignalMetrics(pipeline.registry, clock=lambda: 100.0)
    for i in range(3000):
        sink.state(("ns", f"us-{i}"), None, state("w", 0))
    wl = pipeline.workload("w")
    ckpt = Recording(pipeline)
    server = MetricsServer(pipeline.registry, checkpointer=ckpt)  # type: ignore[arg-type]
    runner, url = await start_site(server.app, "127.0.0.1:0")
    stop = asyncio.Event()

    async def events() -> None:
        seq = 0
        while not stop.is_set():
            seq += 1
            wl.offer(event(seq), "route")
            for i in range(0, 3000, 7):  # rows to render again ahead of the next scrape
                key = ("ns", f"us-{(i + seq) % 3000}")
                sink.state(key, state("w", 0), state("w", seq))
            await asyncio.sleep(0)

    feeder = asyncio.create_task(events())
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(4):
                async with session.get(f"{url}/metrics") as r:
                    body = (await r.read()).decode()
                got = text_samples(body)
                shown = got[("zaroz_events_total", (("type", "unit.created"), ("workload", "w")))]
                assert shown == ckpt.saved[-1]
        assert wl.applied_through > ckpt.saved[-1] > ckpt.saved[0]  # events went on meanwhile
    finally:
        stop.set()
        await feeder
        await runner.cleanup()


def test_a_text_scrape_rendered_ahead_leaves_the_changes_to_the_next_protobuf_scrape():
    """Both formats scraped: what a text scrape rendered ahead is still encoded again by the
    next protobuf scrape (the two forms share one change list)."""
    from exporter.sinks.metrics.exposition import Format
    from tests import pbdecode
    from tests.test_protobuf import same

    reg, sink = big_registry(64, 500)
    render_bytes(reg, Format.PROTOBUF)  # protobuf tracked from here
    for i in range(0, 500, 3):
        reg.gauge(BIG).labels(f"a{i}").set(-i)
    for i in range(0, 64, 5):
        sink.state(("ns", f"us-{i}"), state("w", 0), state("w", 7))
    for _ in pbprime.prime_steps(reg, 10, 1, protobuf=False):
        pass
    text = text_samples(render_bytes(reg).decode())
    pb = pbdecode.samples(render_bytes(reg, Format.PROTOBUF))
    moving = ("zaroz_exporter_",)
    assert same({k: v for k, v in pb.items() if not k[0].startswith(moving)},
                {k: v for k, v in text.items() if not k[0].startswith(moving)})
