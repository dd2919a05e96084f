"""The first protobuf scrape of a large registry leaves the event loop free: its encoding is done
ahead in slices (exporter/sinks/metrics/pbprime.py), and /healthz is answered in the middle of
it. Asserted by order and progress (what the priming had done when /healthz answered), never by
wall time; bench/protobuf.py prints the figures (longest slice against the whole encode)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from exporter import catalog
from exporter.catalog import Kind, Metric
from exporter.model.unitsignals import SignalState
from exporter.sinks.metrics import pbprime
from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.metrics.family import Family, Registry
from exporter.web.app import MetricsServer, start_site
from tests import pbdecode
from tests.test_protobuf import ACCEPT_PROTO, same, text_samples
from tests.waiting import until

BIG = "t_big_value"
SERIES = 40_000


def _done(fam: Family) -> bool:
    """Its protobuf form is complete (the scrape's render finished what priming began)."""
    return fam._pb_parts is not None and fam._pb_todo is None


def _started(fam: Family, dirty0: int) -> bool:
    return len(fam.dirty) < dirty0 or fam._pb_parts is not None


async def test_healthz_answers_while_the_first_protobuf_scrape_is_encoded(monkeypatch):
    monkeypatch.setattr(pbprime, "SLICE_SERIES", 500)  # ~160 slices here
    reg = Registry((*catalog.METRICS, Metric(BIG, Kind.GAUGE, "Big.", ("a", "b"))))
    fam = reg[BIG]
    for i in range(SERIES):
        fam.labels(f"a{i % 97}", f"b{i}").set(i / 7)
    dirty0 = len(fam.dirty)
    runner, url = await start_site(MetricsServer(reg).app, "127.0.0.1:0")
    try:
        async with aiohttp.ClientSession() as session:
            async def scrape() -> bytes:
                async with session.get(f"{url}/metrics", headers={"Accept": ACCEPT_PROTO}) as r:
                    return await r.read()

            task = asyncio.create_task(scrape())
            await until(lambda: _started(fam, dirty0), timeout=60, interval=0)
            assert not _done(fam), "the encoding was done in one go: the loop was held"
            async with session.get(f"{url}/healthz") as r:
                assert r.status == 200
            # Answered while the priming was still under way, and the scrape not sent yet.
            progress = fam._pb_next if fam._pb_todo is not None else 0
            assert not _done(fam) and not task.done(), (progress, SERIES)
            body = await task
        assert _done(fam)
        got = pbdecode.samples(body)
        assert sum(1 for k in got if k[0] == BIG) == SERIES
        moving = ("zaroz_exporter_last_scrape", "zaroz_exporter_series", "zaroz_exporter_source_")
        want = {k: v for k, v in text_samples(render_bytes(reg).decode()).items()
                if not k[0].startswith(moving)}
        assert same({k: v for k, v in got.items() if not k[0].startswith(moving)}, want)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("changes", ["during", "none"])
def test_changes_while_priming_are_in_the_scrape(changes):
    """Series changed, added and removed between slices, and UnitSignal rows changed: the
    render after priming shows the state at render time, as text does."""
    from exporter.sinks.metrics.unitsignals import UnitSignalMetrics

    reg = Registry((*catalog.METRICS, Metric(BIG, Kind.GAUGE, "Big.", ("a",))), native=None)
    fam = reg[BIG]
    for i in range(2000):
        fam.labels(f"a{i}").set(i)
    sink = UnitSignalMetrics(reg, clock=lambda: 100.0)
    for i in range(300):
        sink.state(("ns", f"us-{i}"), None, signal_state(f"u{i}", lag=i))
    steps = 0
    for _ in pbprime.prime_steps(reg, 37, 3):
        steps += 1
        if changes == "during":
            fam.labels(f"a{steps}").set(-steps)  # an encoded one or one still to come
            fam.labels(f"new{steps}").set(steps)  # created while priming
            if steps % 5 == 0:
                fam.remove(f"a{steps * 3}")
            key = ("ns", f"us-{steps % 300}")
            sink.state(key, None, signal_state(f"u{steps}", lag=steps))
    assert steps > 20
    pb = pbdecode.samples(b"".join(pbprime_render(reg)))
    assert same(pb, text_samples(render_bytes(reg).decode()))


def pbprime_render(reg: Registry):
    from exporter.sinks.metrics.exposition import render_protobuf

    return render_protobuf(reg)


def signal_state(workload: str, lag: int) -> SignalState:
    return SignalState(
        workload=workload, unit_id=f"unit-{lag}", key="k", agent_version="1.0", labels=(),
        generation_lag=lag, pending_since=50.0 if lag % 2 else None, ready=lag % 2,
        accepting=1, activity="idle", draining="none", allocation_pending=0, status_seq=lag,
        spec_valid=1, status_valid=1, stuck_invalid_spec=0, phase="ready", phase_since=0.0)
