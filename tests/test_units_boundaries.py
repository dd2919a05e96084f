"""The edge of every clock-skew check of model/units.py: an interval whose end has the same
`occurred_at` as its start lasts 0 s and is measured; only an end before its start is skew.

Each measurement is checked at -1 ns, 0 and +1 ns around its start, with the end written the same
way, written differently for the same instant, and through both apply paths (`offer` one by one
and replay's `offer_many`)."""

from __future__ import annotations

import copy

import pytest

from exporter.model.observations import Recorder
from exporter.model.workload import WorkloadLog
from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.workload import WorkloadMetrics
from tests.envelopes import Log

START = "2026-03-01T12:00:00.000001Z"
SAME = {  # other RFC 3339 forms of START's instant
    "same string": START,
    "nanosecond digits": "2026-03-01T12:00:00.000001000Z",
    "an offset": "2026-03-01T13:00:00.000001+01:00",
}
BEFORE = "2026-03-01T12:00:00.000000999Z"  # 1 ns before START
AFTER = "2026-03-01T12:00:00.000001001Z"  # 1 ns after START


def _events(measure: str, end_type: str, start: str, end: str) -> list[dict]:
    log = Log()
    if measure == "ready":
        log.add("unit.created")["occurred_at"] = start
        log.add("unit.ready")["occurred_at"] = end
    elif measure == "allocation_ack":
        log.add("unit.created")
        log.add("unit.allocated")["occurred_at"] = start
        log.add("unit.allocation_delivered")["occurred_at"] = end
    else:
        log.add("unit.created")
        log.add("unit.draining", data={"reason": "scale_down"})["occurred_at"] = start
        log.add(end_type)["occurred_at"] = end
    return log.events


def _apply(events: list[dict], many: bool) -> Recorder:
    rec = Recorder()
    log = WorkloadLog(rec)
    events = copy.deepcopy(events)
    if many:
        log.offer_many(events, object())
    else:
        for ev in events:
            log.offer(ev)
    return rec


def _measured(rec: Recorder, measure: str) -> list[int]:
    if measure == "ready":
        return [ns for _, ns in rec.of("ready")]
    if measure == "allocation_ack":
        return [ns for _, outcome, ns in rec.of("allocation")
                if outcome == "delivered" and ns is not None]
    return [ns for _, reason, ns in rec.of("drain")]


CASES = [("ready", ""), ("allocation_ack", ""), *(
    ("drain", end) for end in ("unit.stopped", "unit.exited", "unit.failed", "unit.destroyed"))]


@pytest.mark.parametrize("many", [False, True], ids=["offer", "offer_many"])
@pytest.mark.parametrize("form", list(SAME))
@pytest.mark.parametrize(("measure", "end_type"), CASES)
def test_an_end_at_the_same_instant_is_a_zero_second_interval(measure, end_type, form, many):
    rec = _apply(_events(measure, end_type, START, SAME[form]), many)
    assert rec.of("skew") == []
    assert _measured(rec, measure) == [0]


@pytest.mark.parametrize("many", [False, True], ids=["offer", "offer_many"])
@pytest.mark.parametrize(("measure", "end_type"), CASES)
def test_an_end_one_nanosecond_either_side(measure, end_type, many):
    rec = _apply(_events(measure, end_type, START, AFTER), many)
    assert rec.of("skew") == [] and _measured(rec, measure) == [1]
    rec = _apply(_events(measure, end_type, START, BEFORE), many)
    assert rec.of("skew") == [(measure,)] and _measured(rec, measure) == []
    if measure == "allocation_ack":  # a skewed ack is still a delivered allocation, unmeasured
        assert [c[1:] for c in rec.of("allocation")] == [("delivered", None)]


def test_zero_second_intervals_reach_the_metrics_and_no_skew_is_counted():
    """The same at the sinks: each histogram gets its 0 s sample, the skew counter stays 0."""
    log = Log()
    log.add("unit.created", at_ms=0)
    log.add("unit.ready", at_ms=0)
    log.add("unit.allocated", at_ms=10)
    log.add("unit.allocation_delivered", at_ms=10)
    log.add("unit.draining", at_ms=20, data={"reason": "stop"})
    log.add("unit.stopped", at_ms=20)
    reg = Registry()
    wl = WorkloadLog(WorkloadMetrics(reg, "wl-1"))
    for ev in log.events:
        wl.offer(ev)
    lines = render_bytes(reg).decode().splitlines()
    for family in ("zaroz_unit_ready_seconds", "zaroz_unit_allocation_ack_seconds",
                   "zaroz_unit_drain_seconds"):
        counts = [ln for ln in lines if ln.startswith(family + "_count")]
        sums = [ln for ln in lines if ln.startswith(family + "_sum")]
        assert counts and all(ln.endswith(" 1") for ln in counts), (family, counts)
        assert sums and all(float(ln.rsplit(" ", 1)[1]) == 0 for ln in sums), (family, sums)
    assert not [ln for ln in lines if ln.startswith("zaroz_events_clock_skew_total{")
                and not ln.endswith(" 0")]
