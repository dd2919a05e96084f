"""The simulator's log is valid, deterministic and its truth matches an independent recount."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator, FormatChecker

from zaroz_sim.scenario import SimConfig, Simulator, Truth
from zaroz_sim.timefmt import TimeForm, floor_ns, render

SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "event.schema.json"
S = 1_000_000_000
TERMINAL = {"unit.stopped", "unit.exited", "unit.failed", "unit.destroyed"}
Log = dict[str, list[dict[str, Any]]]


def run(cfg: SimConfig, seconds: int, step_s: float = 7.3) -> tuple[Simulator, Log]:
    """Run a simulator in uneven slices, then finish; return it and the whole log."""
    sim = Simulator(cfg)
    log: Log = defaultdict(list)
    t, end = cfg.start_ns, cfg.start_ns + seconds * S
    while t < end:
        t = min(end, t + int(step_s * S))
        for wl, events in sim.events_until(t).items():
            log[wl].extend(events)
    for wl, events in sim.finish(end).items():
        log[wl].extend(events)
    return sim, dict(log)


@pytest.fixture(scope="module")
def finished() -> tuple[Simulator, Log]:
    return run(SimConfig(seed=7, workloads=3, arrival_rate=0.3), 400)


def parse_ns(text: str) -> int:
    """Parse with the standard library only (fractions cut to µs): exact to within 1 µs."""
    norm = text.replace("t", "T").replace("z", "Z").replace("Z", "+00:00")
    norm = re.sub(r"\.(\d{1,6})\d*", r".\1", norm)
    dt = datetime.fromisoformat(norm)
    return (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


def recount(log: Log) -> Truth:
    """measurements.md applied to the parsed log, independently of the generator's effects."""
    truth = Truth()
    for wl, events in log.items():
        units: dict[str, dict[str, Any]] = {}
        for ev in events:
            kind, data, t = ev["type"], ev["data"], parse_ns(ev["occurred_at"])
            truth.record(wl, ev, [])
            if ev["unit"] is None:
                continue
            u = units.setdefault(ev["unit"]["id"], {"ready": False, "done": False})
            if kind == "unit.created":
                u["created"] = t
            elif kind == "unit.ready" and not u["ready"]:
                u["ready"] = u["done"] = True
                truth.startups[(wl, "ready")] += 1
                add_interval(truth, wl, "ready", u["created"], t)
            elif kind == "unit.allocated":
                if u.get("alloc") is not None:
                    truth.allocations[(wl, "superseded")] += 1
                u["alloc"] = t
            elif kind == "unit.allocation_delivered" and u.get("alloc") is not None:
                truth.allocations[(wl, "delivered")] += 1
                add_interval(truth, wl, "allocation_ack", u.pop("alloc"), t)
            elif kind == "unit.allocation_undelivered" and u.get("alloc") is not None:
                truth.allocations[(wl, "undelivered")] += 1
                u.pop("alloc")
            elif kind == "unit.draining" and u.get("drain") is None:
                reason = data.get("reason")
                ok = reason in ("stop", "destroy", "replace", "scale_down")
                u["drain"] = (t, reason if ok else "unknown")
            elif kind in TERMINAL:
                if u.get("alloc") is not None:
                    truth.allocations[(wl, "abandoned")] += 1
                    u.pop("alloc")
                if u.get("drain") is not None:
                    start, reason = u.pop("drain")
                    add_interval(truth, wl, "drain", start, t, reason)
                if not u["done"] and kind in ("unit.failed", "unit.destroyed"):
                    u["done"] = True
                    truth.startups[(wl, kind.removeprefix("unit."))] += 1
    return truth


def add_interval(truth: Truth, wl: str, what: str, start: int, end: int, reason: str = "") -> None:
    if end < start:
        truth.skew[(wl, what)] += 1
    elif what == "ready":
        truth.ready[wl].append(end - start)
    elif what == "allocation_ack":
        truth.allocation_ack[wl].append(end - start)
    else:
        truth.drain[(wl, reason)].append(end - start)


def assert_truth_matches(truth: Truth, expected: Truth) -> None:
    """Counters equal exactly; every duration within 1 µs of the parsed difference."""
    for name in ("startups", "allocations", "skew", "events_by_type", "exits", "failures"):
        assert +getattr(truth, name) == +getattr(expected, name), name
    assert +truth.destroyed == +expected.destroyed
    assert truth.desired == expected.desired
    assert truth.last_seq == expected.last_seq
    for name in ("ready", "allocation_ack", "drain"):
        got, want = getattr(truth, name), getattr(expected, name)
        assert {k for k, v in got.items() if v} == {k for k, v in want.items() if v}, name
        for key, values in want.items():
            assert len(got[key]) == len(values), (name, key)
            for a, b in zip(got[key], values, strict=True):
                assert abs(a - b) < 1000, (name, key, a, b)


def test_every_envelope_is_valid(finished: tuple[Simulator, Log]) -> None:
    validator = Draft202012Validator(json.loads(SCHEMA.read_text()), format_checker=FormatChecker())
    _, log = finished
    for events in log.values():
        for ev in events:
            errors = list(validator.iter_errors(ev))
            assert not errors, (ev, errors[0].message)
            if ev["unit"] is not None:
                assert ev["unit"]["key"] == ev["unit"]["key"].lower()


def test_seqs_gapless_and_ids_unique(finished: tuple[Simulator, Log]) -> None:
    sim, log = finished
    ids = [ev["id"] for events in log.values() for ev in events]
    assert len(ids) == len(set(ids))
    assert set(log) == {wl.id for wl in sim.workloads} == {"wl-1", "wl-2", "wl-3"}
    for wl, events in log.items():
        assert [ev["seq"] for ev in events] == list(range(1, len(events) + 1))
        assert sim.truth.last_seq[wl] == len(events) > 500


def test_deterministic_regardless_of_slicing() -> None:
    cfg = SimConfig(seed=11, workloads=2)
    _, a = run(cfg, 120, step_s=0.5)
    _, b = run(SimConfig(seed=11, workloads=2), 120, step_s=41)
    _, c = run(SimConfig(seed=12, workloads=2), 120)
    assert a == b
    assert a != c


def test_truth_matches_independent_recount(finished: tuple[Simulator, Log]) -> None:
    sim, log = finished
    assert_truth_matches(sim.truth, recount(log))


def test_truth_of_a_partial_run_covers_only_emitted_events() -> None:
    cfg = SimConfig(seed=3, workloads=2, arrival_rate=0.5)
    sim = Simulator(cfg)
    log: Log = defaultdict(list)
    for k in range(1, 9):
        cut = cfg.start_ns + k * 15 * S
        for wl, events in sim.events_until(cut).items():
            assert all(parse_ns(ev["occurred_at"]) <= cut for ev in events)
            log[wl].extend(events)
        assert_truth_matches(sim.truth, recount(log))
    assert sum(sim.truth.events_by_type.values()) == sum(len(v) for v in log.values())


def test_outcomes_add_up(finished: tuple[Simulator, Log]) -> None:
    sim, _ = finished
    tr = sim.truth
    for wl in ("wl-1", "wl-2", "wl-3"):
        created = tr.events_by_type[(wl, "unit.created")]
        startups = sum(tr.startups[(wl, o)] for o in ("ready", "failed", "destroyed"))
        assert startups == created == tr.events_by_type[(wl, "unit.destroyed")] > 50
        assert len(tr.ready[wl]) + tr.skew[(wl, "ready")] == tr.startups[(wl, "ready")]
        outcomes = ("delivered", "undelivered", "superseded", "abandoned")
        assert (
            sum(tr.allocations[(wl, o)] for o in outcomes)
            == tr.events_by_type[(wl, "unit.allocated")]
        )
        assert (
            len(tr.allocation_ack[wl]) + tr.skew[(wl, "allocation_ack")]
            == tr.allocations[(wl, "delivered")]
        )
        drains = sum(len(v) for (w, _), v in tr.drain.items() if w == wl)
        assert drains + tr.skew[(wl, "drain")] == tr.events_by_type[(wl, "unit.draining")]
        assert all(v >= 0 for v in tr.ready[wl] + tr.allocation_ack[wl])
    # the mix is lively: every outcome and edge case shows up somewhere
    for outcome in ("ready", "failed", "destroyed"):
        assert any(o == outcome and n for (_, o), n in tr.startups.items())
    for outcome in ("delivered", "undelivered", "superseded", "abandoned"):
        assert any(o == outcome and n for (_, o), n in tr.allocations.items())
    assert {r for (_, r), v in tr.drain.items() if v} == {
        "stop",
        "destroy",
        "replace",
        "scale_down",
        "unknown",
    }
    assert {m for (_, m), n in tr.skew.items() if n} >= {"ready", "allocation_ack"}
    assert any(restarted and code != 0 for (_, code, restarted) in tr.exits)
    assert any(t == "unit.future_thing" for (_, t) in tr.events_by_type)
    assert all(tr.desired[wl] >= 0 for wl in ("wl-1", "wl-2", "wl-3"))


def test_lifecycle_order(finished: tuple[Simulator, Log]) -> None:
    _, log = finished
    for events in log.values():
        per_unit: dict[str, list[str]] = defaultdict(list)
        for ev in events:
            if ev["type"] == "units.scaled":
                assert ev["unit"] is None and {"from", "to", "reason"} <= set(ev["data"])
            elif ev["type"] != "unit.future_thing":  # unknown types may appear anywhere
                per_unit[ev["unit"]["id"]].append(ev["type"])
        for types in per_unit.values():
            assert types[0] == "unit.created" and types[1] == "unit.starting"
            assert types[-1] == "unit.destroyed" and types.count("unit.destroyed") == 1
            if "unit.ready" in types:
                assert types.index("unit.starting") < types.index("unit.ready")
            restarts = Counter(types)["unit.exited"]
            assert types.count("unit.ready") <= 1 + restarts
            assert types.count("unit.draining") <= 1


def test_timestamp_forms_and_unknown_fields(finished: tuple[Simulator, Log]) -> None:
    _, log = finished
    stamps = [ev["occurred_at"] for events in log.values() for ev in events]
    assert any(s.endswith("Z") for s in stamps) and any(s.endswith("z") for s in stamps)
    assert any("t" in s for s in stamps)
    assert any(re.search(r"\+\d\d:\d\d$", s) for s in stamps)
    assert any(re.search(r"-\d\d:\d\d$", s) for s in stamps)
    digits = {len(m.group(1)) if m else 0 for s in stamps for m in [re.search(r"\.(\d+)", s)]}
    assert digits == set(range(10))
    envelope_extra = {k for events in log.values() for ev in events for k in ev} - {
        "seq",
        "id",
        "type",
        "contract_version",
        "occurred_at",
        "service_instance_id",
        "unit",
        "data",
    }
    assert envelope_extra
    assert any("x_future_hint" in ev["data"] for events in log.values() for ev in events)
    assert any("allocation_id" in ev["data"] for events in log.values() for ev in events)


def test_render_offsets_and_flooring() -> None:
    t = 1_700_000_000 * S + 123_456_789
    assert render(t, TimeForm(9)) == "2023-11-14T22:13:20.123456789Z"
    floored = floor_ns(t, 2)
    assert floored == 1_700_000_000 * S + 120_000_000
    assert render(floored, TimeForm(2, offset_min=-330, lower_t=True)) == (
        "2023-11-14t16:43:20.12-05:30"
    )
    assert render(floor_ns(t, 0), TimeForm(0, offset_min=120)) == "2023-11-15T00:13:20+02:00"
    assert render(floor_ns(t, 0), TimeForm(0, offset_min=0, negative_zero=True)).endswith("-00:00")
    assert parse_ns(render(floored, TimeForm(2, offset_min=345))) == floored
    with pytest.raises(ValueError):
        render(t, TimeForm(3))


@given(
    t=st.integers(min_value=0, max_value=4_000_000_000 * S),
    digits=st.integers(min_value=0, max_value=9),
    offset=st.sampled_from([None, 0, 60, -330, 345, 840, -720]),
    lower=st.booleans(),
)
def test_render_round_trips(t: int, digits: int, offset: int | None, lower: bool) -> None:
    floored = floor_ns(t, digits)
    assert 0 <= t - floored < 10 ** (9 - digits)
    text = render(floored, TimeForm(digits, offset, lower_z=lower, lower_t=lower))
    parsed = parse_ns(text)
    assert 0 <= floored - parsed < 1000
