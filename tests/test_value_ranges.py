"""Values valid per the contract that the model or the store cannot hold (model/ranges.py) are
refused where they enter the model: counted, never stored, and never an exception in a later
save, render or restore.

Edges from the schemas: `format: date-time` accepts years 0000-9999 with offsets and leap
seconds, so `occurred_at` is checked at 1 ns either side of the model's clock (1970-01-01 and
2262-04-11T23:47:16.854775807Z, written in UTC and with offsets); `seq` and `units.scaled`'s
counts are integers without a maximum, so they are checked either side of 64 bits; the
UnitSignal status and spec hold generations, `status.seq` and times with the same edges.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.model.ranges import INT_MAX, SEQ_MAX, clock_ns
from exporter.model.workload import RANGE
from exporter.sinks.metrics.exposition import Format, render
from exporter.sources.kube.typed import decode_list
from exporter.timestamps import parse_rfc3339_ns
from exporter.wiring.events import Pipeline
from exporter.wiring.state.checkpoint import Checkpointer
from exporter.wiring.state.store import read_state
from exporter.wiring.unitsignals import build_cluster
from tests.envelopes import Log
from tests.simlogs import parse, value
from tests.unitsignals import T0, status, unitsignal

LAST = "2262-04-11T23:47:16.854775807Z"
# (occurred_at, whether the model holds it)
EDGES = [
    ("1970-01-01T00:00:00Z", True),
    ("1969-12-31T23:59:59.999999999Z", False),
    ("1970-01-01T01:00:00+01:00", True),
    ("1970-01-01T00:59:59.999999999+01:00", False),
    ("1969-12-31T23:00:00-01:00", True),
    (LAST, True),
    ("2262-04-11T23:47:16.854775808Z", False),
    ("2262-04-12T00:47:16.854775807+01:00", True),
    ("2262-04-11T22:47:16.854775808-01:00", False),
    ("2300-01-01T00:00:00Z", False),
    ("9999-12-31T23:59:59.999999999Z", False),
    ("9999-12-31T23:59:60Z", False),  # a leap second, valid per the schema
    ("9999-12-31T23:59:59-23:59", False),  # beyond year 9999 in UTC
    ("0000-01-01T00:00:00Z", False),
    ("0000-01-01T00:00:00+23:59", False),
]


def _samples(p: Pipeline) -> dict:
    return parse(b"".join(render(p.registry, False)).decode())


def _offer(p: Pipeline, events: list[dict], path: str) -> None:
    wl = p.workload("wl")
    if path == "offer":
        for ev in events:
            wl.offer(copy.deepcopy(ev), "route")
    else:
        wl.offer_many([copy.deepcopy(ev) for ev in events], object(), "route")


def _unit_log(at: str) -> Log:
    """created, ready (at `at`), then a third event: the middle one is the edge."""
    log = Log()
    log.add("unit.created")
    log.add("unit.ready", at_ms=1000)["occurred_at"] = at
    log.add("unit.busy", at_ms=2000)
    return log


@pytest.mark.parametrize("path", ["offer", "offer_many"])
@pytest.mark.parametrize(("at", "fits"), EDGES, ids=[a for a, _ in EDGES])
def test_an_occurred_at_outside_the_clock_is_counted_invalid_and_the_log_goes_on(
        tmp_path, at, fits, path):
    assert (clock_ns(at) is not None) is fits
    p = Pipeline()
    cp = Checkpointer(tmp_path, p)
    _offer(p, _unit_log(at).events, path)
    wl = p.logs["wl"]
    assert wl.applied_through == 3  # its seq used up: no gap, the next one applied
    s = _samples(p)
    assert value(s, "zaroz_events_invalid_total", workload="wl", reason="range") == (
        0 if fits else 1)
    assert value(s, "zaroz_events_total", workload="wl", type="unit.ready") == (
        1 if fits else 0)
    assert wl.last_at != at or fits  # the clock never holds it
    assert cp.save()
    for fmt in Format:
        list(render(p.registry, fmt))
    cp.close()
    restored = Pipeline()
    again = Checkpointer(tmp_path, restored)
    assert again.load() == 1
    assert restored.logs["wl"].applied_through == 3
    again.close()


@pytest.mark.parametrize("path", ["offer", "offer_many"])
def test_one_out_of_range_behind_a_gap_is_kept_as_such_across_a_restart(tmp_path, path):
    """Waiting behind a gap it is stored as a marker, not as the event; applied after the
    restart it counts as range, once."""
    log = _unit_log("9999-12-31T23:59:59Z")
    p = Pipeline()
    cp = Checkpointer(tmp_path, p)
    _offer(p, log.events[1:], path)  # seq 1 missing: 2 and 3 wait
    assert p.logs["wl"].applied_through == 0
    assert cp.save()
    state = read_state(tmp_path)
    assert state is not None
    assert state["workloads"]["wl"]["log"]["pending"][0] == [2, RANGE]
    cp.close()
    restored = Pipeline()
    again = Checkpointer(tmp_path, restored)
    again.load()
    _offer(restored, log.events[:1], path)
    assert restored.logs["wl"].applied_through == 3
    s = _samples(restored)
    assert value(s, "zaroz_events_invalid_total", workload="wl", reason="range") == 1
    assert value(s, "zaroz_events_invalid_total", workload="wl", reason="schema") == 0
    assert again.save()
    again.close()


@pytest.mark.parametrize(("seq", "fits"), [
    (SEQ_MAX, True), (SEQ_MAX + 1, False), (INT_MAX + 1, False), (2**64, False),
    (2**70, False), (1e19, False), (float(2**62), True)])
def test_a_seq_beyond_64_bits_is_counted_and_uses_up_nothing(tmp_path, seq, fits):
    p = Pipeline()
    cp = Checkpointer(tmp_path, p)
    wl = p.workload("wl")
    log = Log()
    log.add("unit.created")
    ev = log.add("unit.busy")
    ev["seq"] = seq
    for e in log.events:
        wl.offer(e, "route")
    s = _samples(p)
    assert value(s, "zaroz_events_invalid_total", workload="wl", reason="range") == (
        0 if fits else 1)
    assert wl.applied_through == 1
    assert (int(seq) in wl.pending) is fits
    wl.give_up(2**80)  # a route's head beyond what the log holds: no further than it can
    assert wl.applied_through <= SEQ_MAX
    assert cp.save()
    for fmt in Format:
        list(render(p.registry, fmt))
    cp.close()


@pytest.mark.parametrize(("to", "fits"), [(INT_MAX, True), (INT_MAX + 1, False),
                                          (2**64 - 1, False), (1e300, True)])
def test_units_scaled_to_beyond_64_bits_is_counted_invalid(tmp_path, to, fits):
    p = Pipeline()
    cp = Checkpointer(tmp_path, p)
    log = Log()
    log.add("units.scaled", unit=None, data={"from": 0, "to": to, "reason": "policy"})
    p.workload("wl").offer(log.events[0], "webhook")
    s = _samples(p)
    assert value(s, "zaroz_events_invalid_total", workload="wl", reason="range") == (
        0 if fits else 1)
    assert cp.save()
    cp.close()


def test_integers_beyond_64_bits_in_free_form_data_are_saved(tmp_path):
    """An event's `data` is any object: one waiting behind a gap is stored whatever it holds."""
    p = Pipeline()
    cp = Checkpointer(tmp_path, p)
    log = Log()
    log.add("unit.created")
    log.add("unit.exited", data={"code": 2**70, "restarted": False, "extra": [-(2**90)]})
    p.workload("wl").offer(log.events[1], "route")
    assert cp.save()
    cp.close()
    restored = Pipeline()
    again = Checkpointer(tmp_path, restored)
    again.load()
    restored.logs["wl"].offer(log.events[0], "route")
    assert restored.logs["wl"].applied_through == 2
    again.close()


def test_a_histogram_sum_beyond_64_bits_is_saved_and_restored_exactly(tmp_path):
    """Durations of up to 292 years each fit the clock; their sum outgrows 64 bits."""
    p = Pipeline()
    cp = Checkpointer(tmp_path, p)
    log = Log()
    for i in range(3):
        log.add("unit.created", unit=f"u{i}")["occurred_at"] = "1970-01-01T00:00:00Z"
        log.add("unit.ready", unit=f"u{i}")["occurred_at"] = LAST
    for ev in log.events:
        p.workload("wl").offer(ev, "route")
    h = p.registry.families["zaroz_unit_ready_seconds"].series[("wl",)]
    assert h.sum_ns == 3 * INT_MAX > 2**64
    assert cp.save()
    cp.close()
    restored = Pipeline()
    again = Checkpointer(tmp_path, restored)
    again.load()
    assert restored.registry.families["zaroz_unit_ready_seconds"].series[("wl",)].sum_ns == (
        3 * INT_MAX)
    again.close()


_date_times = st.builds(
    lambda y, mo, d, h, mi, s, frac, off: (
        f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{frac}{off}"),
    st.integers(0, 9999), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23),
    st.integers(0, 59), st.integers(0, 59),
    st.sampled_from(["", ".5", ".999999999", ".000000001"]),
    st.sampled_from(["Z", "+00:00", "+23:59", "-23:59", "+01:00", "-00:30"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(at=_date_times)
def test_any_date_time_is_applied_or_counted_and_never_stops_a_save(tmp_path_factory, at):
    ns = parse_rfc3339_ns(at)
    fits = 0 <= ns <= INT_MAX
    d = tmp_path_factory.mktemp("s")
    p = Pipeline()
    cp = Checkpointer(d, p)
    _offer(p, _unit_log(at).events, "offer_many")
    s = _samples(p)
    assert value(s, "zaroz_events_invalid_total", workload="wl", reason="range") == (
        0 if fits else 1)
    assert p.logs["wl"].applied_through == 3
    assert cp.save()
    cp.close()


# -- UnitSignals ----------------------------------------------------------------------------

US_EDGES = [
    ("signalledReady", "9999-12-31T23:59:59Z", False),
    ("signalledReady", "0000-01-01T00:00:00Z", False),
    ("signalledReady", "1969-12-31T23:59:59.999999999Z", False),
    ("signalledReady", LAST, True),
    ("activitySince", "9999-12-31T23:59:60Z", False),
    ("shutdownRequestedAt", "2262-04-11T23:47:16.854775808Z", False),
    ("seq", INT_MAX, True),
    ("seq", INT_MAX + 1, False),
    ("seq", -(2**63), True),
    ("seq", -(2**63) - 1, False),
    ("seq", 10**400, False),
    ("observedGeneration", INT_MAX, True),
    ("observedGeneration", INT_MAX + 1, False),
    ("observedGeneration", -(2**63), True),
    ("observedGeneration", -(2**63) - 1, False),
    ("observedGeneration", 10**400, False),
]


def _us_samples(p: Pipeline) -> dict:
    for fmt in Format:  # every format renders
        list(render(p.registry, fmt))
    return _samples(p)


def _typed(obj: dict) -> object:
    """The object as the watch decodes it (metadata typed, spec and status kept as bytes)."""
    got = decode_list(json.dumps({"metadata": {"resourceVersion": "1"},
                                  "items": [obj]}).encode())
    assert got is not None
    return got[0][0]


@pytest.mark.parametrize("typed", [False, True], ids=["dict", "typed"])
@pytest.mark.parametrize(("field", "v", "fits"), US_EDGES,
                         ids=[f"{f}={str(v)[:24]}" for f, v, _ in US_EDGES])
def test_a_unitsignal_status_value_out_of_range_is_a_counted_rejection(tmp_path, field, v,
                                                                      fits, typed):
    p = Pipeline()
    cp = Checkpointer(tmp_path, p)
    model, _ = build_cluster(p.registry)
    over = {field: v}
    if field != "signalledReady":
        over["signalledReady"] = "2026-01-01T00:00:00Z"
    first = unitsignal(created=T0, status_=status(**over))
    model.upsert(_typed(first) if typed else first, T0 + 1)
    again = unitsignal(created=T0, status_=status(**over))
    again["metadata"]["resourceVersion"] = "2"
    model.upsert(_typed(again) if typed else again, T0 + 2)  # the same status: counted once
    s = _us_samples(p)
    assert value(s, "zaroz_unitsignal_conformance_violations_total", workload="wl-1",
                 rule="out_of_range") == (0 if fits else 1)
    if field == "signalledReady":  # the readiness measured only from a time that fits
        assert value(s, "zaroz_unitsignal_ready_seconds_count", workload="wl-1") + value(
            s, "zaroz_unitsignal_clock_skew_total", workload="wl-1",
            measurement="ready") == (1 if fits else 0)
    assert cp.save()
    cp.close()


@pytest.mark.parametrize(("spec", "fits"), [
    ({"generation": 10**30}, False),
    ({"generation": INT_MAX}, True),
    ({"allocation": {"id": "a", "generation": 2**64, "allocatedAt": "2026-01-01T00:00:00Z"}},
     False),
    ({"allocation": {"id": "a", "generation": 1, "allocatedAt": "9999-01-01T00:00:00Z"}},
     False),
])
def test_a_unitsignal_spec_value_out_of_range_is_a_counted_rejection(tmp_path, spec, fits):
    p = Pipeline()
    cp = Checkpointer(tmp_path, p)
    model, _ = build_cluster(p.registry)
    obj = unitsignal(status_=status(allocationAck="a"), **spec)
    if "generation" in spec:
        obj["metadata"]["generation"] = spec["generation"]
    model.upsert(obj, T0)
    s = _us_samples(p)
    assert value(s, "zaroz_unitsignal_conformance_violations_total", workload="wl-1",
                 rule="out_of_range") == (0 if fits else 1)
    assert cp.save()
    cp.close()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(ready=_date_times, created=_date_times)
def test_any_unitsignal_times_are_measured_or_counted_never_an_error(tmp_path_factory, ready,
                                                                      created):
    d = tmp_path_factory.mktemp("u")
    p = Pipeline()
    cp = Checkpointer(d, p)
    model, _ = build_cluster(p.registry)
    obj = unitsignal(status_=status(signalledReady=ready))
    obj["metadata"]["creationTimestamp"] = created
    model.upsert(obj, T0)
    s = _us_samples(p)
    out = value(s, "zaroz_unitsignal_conformance_violations_total", workload="wl-1",
                rule="out_of_range")
    assert out == (0 if clock_ns(ready) is not None else 1)
    assert cp.save()
    cp.close()
