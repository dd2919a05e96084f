"""WorkloadLog.offer_many (replay's batch path, the usual case inline) makes exactly the observer
and tap calls, in the same order, and ends in the same state as `offer` line by line."""

from __future__ import annotations

import gzip
import random

import orjson
import pytest

from exporter.model.observations import Recorder
from exporter.model.workload import WorkloadLog
from tests.data.replay_golden.make import inputs

NOT_JSON = object()


def _decoded(path) -> list[object]:
    out: list[object] = []
    for line in gzip.decompress(path.read_bytes()).splitlines():
        if line.strip():
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                out.append(NOT_JSON)
    return out


def _log() -> tuple[WorkloadLog, Recorder, list[tuple]]:
    rec = Recorder()
    log = WorkloadLog(rec, max_pending=50)
    taps: list[tuple] = []
    log.tap = lambda *a: taps.append(a)
    return log, rec, taps


@pytest.mark.parametrize("path", inputs(), ids=lambda p: p.name)
def test_offer_many_equals_offer_one_by_one(path):
    objs = _decoded(path)
    assert sum(o is NOT_JSON for o in objs) > 10
    one, rec1, taps1 = _log()
    for o in objs:
        if o is NOT_JSON:
            one.reject_json()
        else:
            one.offer(o)
    many, rec2, taps2 = _log()
    rnd = random.Random(5)
    i = 0
    while i < len(objs):
        n = rnd.randint(1, 64)
        many.offer_many(objs[i : i + n], NOT_JSON)
        i += n
    assert len(rec1.calls) > 10_000
    assert rec2.calls == rec1.calls
    assert taps2 == taps1
    one.flush()
    many.flush()
    assert rec2.calls == rec1.calls
    assert many.snapshot() == one.snapshot()


def test_offer_many_takes_the_general_path_for_what_is_not_the_next_seq():
    """Reordered, repeated and invalid events in one batch: counted as offer counts them."""
    base = {"id": "evt_" + "0" * 32, "contract_version": 1, "service_instance_id": "p",
            "occurred_at": "2026-01-01T00:00:00Z", "unit": None, "data": {}}
    evs = [base | {"seq": s, "type": "units.scaled", "data": {"from": 0, "to": s, "reason": "r"}}
           for s in (1, 3, 2, 2, 4)]
    evs.append(base | {"seq": 5, "type": "webhook.ping"})
    evs.append({"seq": 5, "type": "unit.created"})  # fails the schema, uses up seq 5
    evs.append(base | {"seq": 6.0, "type": "units.scaled",
                       "data": {"from": 0, "to": 6, "reason": "r"}})
    log, rec, _ = _log()
    log.offer_many(evs, NOT_JSON)
    assert rec.of("desired") == [(1,), (2,), (3,), (4,), (6,)]
    assert rec.of("duplicate") == [("file",)]
    assert rec.of("invalid") == [("schema",)]
    assert rec.of("ping") == [(5,)]
    assert log.applied_through == 6


@pytest.mark.parametrize("path", inputs(), ids=lambda p: p.name)
def test_offer_many_renders_what_offer_renders(path):
    """Through WorkloadMetrics: the exposition, series order included, is the same as from
    `offer` line by line."""
    from exporter.sinks.metrics.exposition import render_bytes
    from exporter.sinks.metrics.family import Registry
    from exporter.sinks.metrics.workload import WorkloadMetrics

    objs = _decoded(path)
    bodies = []
    for batched in (False, True):
        reg = Registry()
        log = WorkloadLog(WorkloadMetrics(reg, "w"), max_pending=50)
        if batched:
            for i in range(0, len(objs), 32):
                log.offer_many(objs[i : i + 32], NOT_JSON)
        else:
            for o in objs:
                log.reject_json() if o is NOT_JSON else log.offer(o)
        log.flush()
        bodies.append(render_bytes(reg))
    assert b'zaroz_events_total{workload="w",type="unit.ready"}' in bodies[0]
    assert bodies[1] == bodies[0]
