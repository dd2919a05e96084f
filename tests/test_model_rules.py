"""Every rule of measurements.md, at the level of the pure lifecycle model."""

from __future__ import annotations

import copy

import pytest

from exporter.model.observations import Recorder
from exporter.model.workload import WorkloadLog
from tests.envelopes import Log

MS = 1_000_000  # ns


def run(events, **kw) -> tuple[Recorder, WorkloadLog]:
    rec = Recorder()
    log = WorkloadLog(rec, **kw)
    for ev in events:
        log.offer(copy.deepcopy(ev))
    log.flush()
    return rec, log


# Applying a workload's events -----------------------------------------------------------------


def test_events_apply_in_seq_order_whatever_the_arrival_order():
    log = Log()
    log.add("unit.created", at_ms=0)
    log.add("unit.ready", at_ms=1500)
    rec, wl = run(reversed(log.events))
    assert rec.of("ready") == [("u1", 1500 * MS)]
    assert [c[1] for c in rec.of("applied")] == [1, 2]
    assert wl.applied_through == 2


def test_duplicate_seq_is_ignored_and_counted():
    log = Log()
    a = log.add("unit.created", at_ms=0)
    b = log.add("unit.ready", at_ms=10)
    rec, _ = run([a, a, b, a, b])
    assert len(rec.of("duplicate")) == 3
    assert len(rec.of("ready")) == 1
    assert len(rec.of("applied")) == 2


def test_duplicate_of_an_event_still_waiting_behind_a_gap_is_counted_once():
    log = Log()
    a = log.add("unit.created", at_ms=0)
    b = log.add("unit.starting", at_ms=1)
    c = log.add("unit.ready", at_ms=2)
    rec, _ = run([c, c, a, b])
    assert len(rec.of("duplicate")) == 1
    assert len(rec.of("applied")) == 3


def test_skipped_seq_is_a_gap_given_up_at_the_end_and_later_events_still_apply():
    log = Log()
    a = log.add("unit.created", at_ms=0)
    log.add("unit.starting", at_ms=1)  # lost
    log.add("unit.accepting", at_ms=2)  # lost
    d = log.add("unit.ready", at_ms=3)
    rec, wl = run([a, d])
    assert rec.of("gap") == [(2, 3)]
    assert rec.of("ready") == [("u1", 3 * MS)]
    assert wl.applied_through == 4


def test_give_up_counts_each_run_of_missing_seqs():
    log = Log()
    evs = [log.add("unit.idle", at_ms=i) for i in range(10)]
    rec = Recorder()
    wl = WorkloadLog(rec)
    for i in (0, 3, 4, 8):
        wl.offer(evs[i])
    wl.give_up(10)
    assert rec.of("gap") == [(2, 3), (6, 8), (10, 10)]
    assert wl.applied_through == 10


def test_invalid_event_is_counted_not_applied_and_uses_up_its_seq():
    log = Log()
    log.add("unit.created", at_ms=0)
    bad = log.add("unit.ready", at_ms=5)
    bad["occurred_at"] = "2026-03-01 12:00:00Z"  # not RFC 3339 (space separator)
    log.add("unit.ready", at_ms=7)
    rec, wl = run(log.events)
    assert rec.of("invalid") == [("schema",)]
    assert rec.of("gap") == []
    assert rec.of("ready") == [("u1", 7 * MS)]
    assert wl.applied_through == 3


@pytest.mark.parametrize(
    "mutate",
    [
        lambda e: e.pop("id"),
        lambda e: e.update(contract_version=2),
        lambda e: e.update(id="nope"),
        lambda e: e.update(unit={"id": "u1"}),
        lambda e: e.update(occurred_at="2026-02-30T00:00:00Z"),
        lambda e: e.update(occurred_at="yesterday"),
        lambda e: e.update(data=[]),
    ],
)
def test_schema_violations_are_invalid(mutate):
    log = Log()
    ev = log.add("unit.created")
    mutate(ev)
    rec, _ = run([ev])
    assert rec.of("invalid") == [("schema",)]
    assert rec.of("applied") == []


def test_invalid_event_without_a_usable_seq_is_counted_and_uses_no_seq():
    rec = Recorder()
    wl = WorkloadLog(rec)
    wl.offer({"seq": "1"})
    wl.offer([1, 2])
    wl.offer(None)
    wl.reject_json()
    assert rec.of("invalid") == [("schema",), ("schema",), ("schema",), ("json",)]
    assert wl.applied_through == 0


@pytest.mark.parametrize(
    "stamp",
    [
        "2026-03-01T12:00:01Z",
        "2026-03-01t12:00:01z",
        "2026-03-01T14:00:01+02:00",
        "2026-03-01T06:30:01-05:30",
        "2026-03-01T12:00:01-00:00",
        "2026-03-01T12:00:01.000Z",
        "2026-03-01T12:00:01.000000000Z",
        "2026-03-01T12:00:00.9999999999999+00:00",
    ],
)
def test_every_rfc3339_form_is_valid(stamp):
    log = Log()
    log.add("unit.created", at_ms=0)
    ev = log.add("unit.ready")
    ev["occurred_at"] = stamp
    rec, _ = run(log.events)
    assert rec.of("invalid") == []
    (ready,) = rec.of("ready")
    expected = 999_999_999 if stamp.endswith("9+00:00") else 1_000_000_000
    assert ready == ("u1", expected)


def test_unknown_types_and_fields_are_ignored_with_a_bounded_type_label():
    log = Log()
    log.add("unit.created", at_ms=0, extra_field={"x": 1})
    log.add("unit.teleported", at_ms=1)
    log.add("zzz.whatever", unit=None, at_ms=2)
    log.add("unit.ready", at_ms=3, data={"private_name": "p", "new": True})
    rec, _ = run(log.events)
    types = [c[0] for c in rec.of("applied")]
    assert types == ["unit.created", "unknown", "unknown", "unit.ready"]
    assert rec.of("invalid") == []
    assert rec.of("ready") == [("u1", 3 * MS)]


def test_webhook_ping_is_not_a_lifecycle_event_and_takes_no_seq():
    log = Log()
    log.add("unit.created", at_ms=0)
    ping = log.add("webhook.ping", unit=None, at_ms=1)
    ping["seq"] = 7
    log.seq = 1
    log.add("unit.ready", at_ms=2)
    zero = dict(ping, seq=0)
    rec, wl = run([*log.events, zero])
    assert rec.of("ping") == [(7,), (0,)]
    assert rec.of("gap") == []
    assert wl.applied_through == 2
    assert rec.of("ready") == [("u1", 2 * MS)]


def test_clock_skew_is_not_observed_but_counted():
    log = Log()
    log.add("unit.created", at_ms=100)
    log.add("unit.ready", at_ms=50)
    log.add("unit.allocated", at_ms=200)
    log.add("unit.allocation_delivered", at_ms=150)
    log.add("unit.draining", at_ms=300, data={"reason": "stop"})
    log.add("unit.stopped", at_ms=299)
    rec, _ = run(log.events)
    assert rec.of("skew") == [("ready",), ("allocation_ack",), ("drain",)]
    assert rec.of("ready") == [] and rec.of("drain") == []
    assert rec.of("allocation") == [("u1", "delivered", None)]
    assert rec.of("startup") == [("u1", "ready")]


def test_zero_length_interval_is_observed():
    log = Log()
    log.add("unit.created", at_ms=5)
    log.add("unit.ready", at_ms=5)
    rec, _ = run(log.events)
    assert rec.of("ready") == [("u1", 0)]


# Headline measurements ------------------------------------------------------------------------


def test_readiness_is_observed_once_per_unit_from_created_to_first_ready():
    log = Log()
    log.add("unit.created", at_ms=0)
    log.add("unit.starting", at_ms=10)
    log.add("unit.ready", at_ms=250)
    log.add("unit.exited", at_ms=400, data={"code": 137, "restarted": True})
    log.add("unit.starting", at_ms=500)
    log.add("unit.ready", at_ms=900)
    rec, _ = run(log.events)
    assert rec.of("ready") == [("u1", 250 * MS)]
    assert rec.of("exited") == [("u1", 137, True)]
    assert rec.of("startup") == [("u1", "ready")]


def test_readiness_needs_both_ends():
    log = Log()
    log.add("unit.ready", at_ms=250)
    rec, _ = run(log.events)
    assert rec.of("ready") == [] and rec.of("startup") == []


def test_units_are_kept_apart():
    log = Log()
    log.add("unit.created", unit="a", at_ms=0)
    log.add("unit.created", unit="b", at_ms=100)
    log.add("unit.ready", unit="b", at_ms=150)
    log.add("unit.ready", unit="a", at_ms=400)
    rec, _ = run(log.events)
    assert rec.of("ready") == [("b", 50 * MS), ("a", 400 * MS)]


def test_allocation_delivered_observes_ack_lag():
    log = Log()
    log.add("unit.allocated", at_ms=1000)
    log.add("unit.allocation_delivered", at_ms=1012.5)
    rec, _ = run(log.events)
    assert rec.of("allocation") == [("u1", "delivered", 12_500_000)]


def test_allocation_while_one_is_pending_supersedes_it():
    log = Log()
    log.add("unit.allocated", at_ms=0)
    log.add("unit.allocated", at_ms=30)
    log.add("unit.allocation_delivered", at_ms=45)
    log.add("unit.allocation_delivered", at_ms=50)  # nothing pending any more
    rec, _ = run(log.events)
    assert rec.of("allocation") == [("u1", "superseded", None), ("u1", "delivered", 15 * MS)]


def test_allocation_undelivered():
    log = Log()
    log.add("unit.allocated", at_ms=0)
    log.add("unit.allocation_undelivered", at_ms=45)
    rec, _ = run(log.events)
    assert rec.of("allocation") == [("u1", "undelivered", None)]


@pytest.mark.parametrize("end", ["unit.stopped", "unit.exited", "unit.failed", "unit.destroyed"])
def test_allocation_pending_when_the_unit_ends_is_abandoned(end):
    log = Log()
    log.add("unit.allocated", at_ms=0)
    log.add(end, at_ms=45)
    log.add("unit.allocation_delivered", at_ms=50)
    rec, _ = run(log.events)
    assert rec.of("allocation") == [("u1", "abandoned", None)]


@pytest.mark.parametrize("end", ["unit.stopped", "unit.exited", "unit.failed", "unit.destroyed"])
@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"reason": "stop"}, "stop"),
        ({"reason": "destroy"}, "destroy"),
        ({"reason": "replace"}, "replace"),
        ({"reason": "scale_down"}, "scale_down"),
        ({"reason": "evicted"}, "unknown"),
        ({"reason": {"x": 1}}, "unknown"),
        ({}, "unknown"),
    ],
)
def test_drain_runs_to_the_first_following_end_with_a_bounded_reason(end, data, reason):
    log = Log()
    log.add("unit.draining", at_ms=100, data=data)
    log.add("unit.idle", at_ms=150)
    log.add(end, at_ms=2100)
    log.add("unit.destroyed", at_ms=3000)
    rec, _ = run(log.events)
    assert rec.of("drain") == [("u1", reason, 2000 * MS)]


def test_repeated_draining_keeps_the_first_start_and_reason():
    log = Log()
    log.add("unit.draining", at_ms=100, data={"reason": "scale_down"})
    log.add("unit.draining", at_ms=600, data={"reason": "destroy"})
    log.add("unit.stopped", at_ms=1100)
    rec, _ = run(log.events)
    assert rec.of("drain") == [("u1", "scale_down", 1000 * MS)]


@pytest.mark.parametrize(
    ("end", "outcome"), [("unit.failed", "failed"), ("unit.destroyed", "destroyed")]
)
def test_startup_lost_before_the_first_ready(end, outcome):
    log = Log()
    log.add("unit.created", at_ms=0)
    log.add(end, at_ms=10)
    log.add("unit.ready", at_ms=20)
    rec, _ = run(log.events)
    assert rec.of("startup") == [("u1", outcome)]


def test_failure_after_ready_is_no_startup_outcome():
    log = Log()
    log.add("unit.created", at_ms=0)
    log.add("unit.ready", at_ms=10)
    log.add("unit.failed", at_ms=20, data={"reason": "oom"})
    log.add("unit.destroyed", at_ms=30)
    rec, _ = run(log.events)
    assert rec.of("startup") == [("u1", "ready")]
    assert rec.of("failed") == [("u1", "oom")]
    assert rec.of("destroyed") == [("u1", "done")]


def test_units_scaled_sets_desired_units():
    log = Log()
    log.add("units.scaled", unit=None, data={"from": 0, "to": 5, "reason": "policy"})
    log.add("units.scaled", unit=None, data={"from": 5, "to": 2, "reason": "policy"})
    rec, _ = run(log.events)
    assert rec.of("desired") == [(5,), (2,)]


# Bounded memory -------------------------------------------------------------------------------


def test_unit_state_goes_when_the_unit_is_destroyed():
    log = Log()
    for i in range(50):
        log.add("unit.created", unit=f"u{i}", at_ms=i)
        log.add("unit.destroyed", unit=f"u{i}", at_ms=i + 1)
    _, wl = run(log.events)
    assert wl.units == {}


def test_idle_units_expire():
    log = Log()
    log.add("unit.created", unit="old", at_ms=0)
    log.add("unit.created", unit="new", at_ms=50_000)
    _, wl = run(log.events, idle_ns=10_000 * MS)
    wl.expire(wl.clock)
    assert set(wl.units) == {"new"}
    assert wl.expired == 1


def test_pending_buffer_is_bounded():
    log = Log()
    evs = [log.add("unit.idle", at_ms=i) for i in range(20)]
    rec = Recorder()
    wl = WorkloadLog(rec, max_pending=5)
    for ev in evs[1:]:
        wl.offer(ev)
    assert len(wl.pending) <= 5
    assert rec.of("gap")[0] == (1, 1)
    assert wl.applied_through == 20


def test_integral_float_seq_is_the_same_seq():
    log = Log()
    a = log.add("unit.created", at_ms=0)
    b = log.add("unit.ready", at_ms=5)
    b["seq"] = 2.0
    rec, wl = run([a, b, dict(b, seq=2)])
    assert rec.of("ready") == [("u1", 5 * MS)]
    assert len(rec.of("duplicate")) == 1
    assert wl.applied_through == 2 and type(wl.applied_through) is int
