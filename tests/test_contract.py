"""exporter.contract: jsonschema-rs (decides) and python-jsonschema (explains) must agree.

Differential property tests: generated valid instances and deliberately broken ones (each
mutation is invalid by the schema's letter), checked by both validators; date-time strings are
also checked against exporter.timestamps.parse_rfc3339_ns, which reads occurred_at later.
"""

from __future__ import annotations

import copy
from collections import Counter
from datetime import date, datetime, timedelta
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.contract import (
    SCHEMA_NAMES,
    SCHEMAS,
    explain,
    is_valid,
    is_valid_event,
    is_valid_unit_signal_spec,
    is_valid_unit_signal_status,
    validator,
)
from exporter.contract import detail as contract_explain
from exporter.timestamps import parse_rfc3339_ns

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------------------------
# date-time strings

_DIGITS_NON_ASCII = "١٢٣０１２"


def _fmt(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str, sep: str, off: str) -> str:
    return f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}{frac}{off}"


def _offset(minutes: int, zulu: str) -> str:
    if zulu in ("Z", "z"):
        return zulu
    sign = "-" if minutes < 0 or zulu == "-" else "+"
    h, m = divmod(abs(minutes), 60)
    return f"{sign}{h:02d}:{m:02d}"


offsets = st.one_of(
    st.just(0), st.integers(-(23 * 60 + 59), 23 * 60 + 59), st.sampled_from([60, -300, 330, 345])
)
fractions = st.one_of(
    st.just(""), st.text("0123456789", min_size=1, max_size=15).map(lambda f: "." + f)
)


@st.composite
def valid_date_times(draw: st.DrawFn) -> str:
    """Every RFC 3339 form: T/t, Z/z/+00:00/-00:00/offsets, 0-15 fraction digits, leap seconds."""
    minutes = draw(offsets)
    zulu = draw(st.sampled_from(["Z", "z", "+", "-"])) if minutes == 0 else ""
    sep = draw(st.sampled_from("Tt"))
    frac = draw(fractions)
    if draw(st.integers(0, 9)) == 0:
        # Leap second: 23:59:60 in UTC, written in local time.
        day = draw(st.dates(min_value=date(2, 1, 1), max_value=date(9998, 12, 30)))
        local = datetime(day.year, day.month, day.day, 23, 59) + timedelta(minutes=minutes)
        return _fmt(local.year, local.month, local.day, local.hour, local.minute, 60, frac, sep,
                    _offset(minutes, zulu))  # fmt: skip
    if draw(st.integers(0, 19)) == 0:
        y, mo, d = 0, draw(st.integers(1, 12)), draw(st.integers(1, 28))  # year 0000 is valid
    else:
        day = draw(st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)))
        y, mo, d = day.year, day.month, day.day
    h, mi, s = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
    return _fmt(y, mo, d, h, mi, s, frac, sep, _offset(minutes, zulu))


_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@st.composite
def invalid_date_times(draw: st.DrawFn) -> str:
    """Near-misses that are invalid by RFC 3339's letter: one component broken."""
    y, mo, d = draw(st.integers(1, 9999)), draw(st.integers(1, 12)), draw(st.integers(1, 28))
    h, mi, s = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
    sep, frac, off = "T", draw(fractions), draw(st.sampled_from(["Z", "z", "+01:00", "-05:30"]))
    broken = draw(st.sampled_from([
        "month", "day", "feb29", "hour", "minute", "second", "leap", "off_h", "off_m", "sep",
        "no_off", "empty_frac", "comma_frac", "unicode_digit", "space", "short",
    ]))  # fmt: skip
    if broken == "month":
        mo = draw(st.sampled_from([0, 13, 99]))
    elif broken == "day":
        d = draw(st.sampled_from([0, _MONTH_DAYS[mo - 1] + 1 + (mo == 2), 32, 99]))
    elif broken == "feb29":
        mo, d, y = 2, 29, draw(st.sampled_from([1900, 2023, 2026, 2100]))
    elif broken == "hour":
        h = draw(st.integers(24, 99))
    elif broken == "minute":
        mi = draw(st.integers(60, 99))
    elif broken == "second":
        s = draw(st.integers(61, 99))
    elif broken == "leap":
        s, off = 60, "Z"
        h, mi = draw(st.sampled_from([(12, 0), (23, 58), (0, 59)]))
    elif broken == "off_h":
        off = f"+{draw(st.integers(24, 99))}:00"
    elif broken == "off_m":
        off = f"-01:{draw(st.integers(60, 99))}"
    elif broken == "sep":
        sep = draw(st.sampled_from([" ", "_", "x", "", "TT"]))
    elif broken == "no_off":
        off = draw(st.sampled_from(["", "+0100", "+01", "UTC", "+1:00", "Z\n", " Z"]))
    elif broken == "empty_frac":
        frac = "."
    elif broken == "comma_frac":
        frac = ",5"
    text = _fmt(y, mo, d, h, mi, s, frac, sep, off)
    if broken == "unicode_digit":
        i = draw(st.sampled_from([0, 3, 5, 9, 12, 18]))
        text = text[:i] + draw(st.sampled_from(_DIGITS_NON_ASCII)) + text[i + 1 :]
    elif broken == "space":
        text = draw(st.sampled_from([" " + text, text + " ", text + "\n"]))
    elif broken == "short":
        text = text[: draw(st.integers(0, 18))]
    return text


@st.composite
def mutated_date_times(draw: st.DrawFn) -> str:
    """Random single-character edits of a valid string: unlabelled, for agreement only."""
    text = draw(valid_date_times())
    i = draw(st.integers(0, len(text)))
    ch = draw(st.sampled_from("0123456789TtZz:-+. \n_x" + _DIGITS_NON_ASCII))
    op = draw(st.sampled_from(["replace", "insert", "delete"]))
    if op == "replace":
        return text[:i] + ch + text[i + 1 :]
    if op == "insert":
        return text[:i] + ch + text[i:]
    return text[:i] + text[i + 1 :]


def _parses(text: str) -> bool:
    try:
        parse_rfc3339_ns(text)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Event envelopes

PING = "webhook.ping"
UNIT_OBJECT_TYPES = (
    "unit.created", "unit.starting", "unit.accepting", "unit.not_accepting",
    "unit.allocation_delivered", "unit.allocation_undelivered", "unit.idle", "unit.busy",
    "unit.draining", "unit.stopped", "unit.ready", "unit.allocated",
)  # fmt: skip
EVENT_TYPES = (
    *UNIT_OBJECT_TYPES, PING, "unit.exited", "unit.failed", "unit.destroyed", "units.scaled",
    "unit.some_future_type", "x",
)  # fmt: skip
REQUIRED_EVENT_FIELDS = tuple(SCHEMAS["event"]["required"])

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63), st.floats(allow_nan=False,
    allow_infinity=False), st.text(max_size=10),
)  # fmt: skip
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8,
)  # fmt: skip
extra_fields = st.dictionaries(st.text(min_size=1, max_size=8).map(lambda k: "x_" + k),
                               json_values, max_size=3)  # fmt: skip
event_ids = (
    st.integers(32, 36)
    .flatmap(lambda n: st.text("0123456789abcdefABCDEF-", min_size=n, max_size=n))
    .map(lambda s: "evt_" + s)
)


@st.composite
def unit_objects(draw: st.DrawFn) -> dict[str, Any]:
    unit = {
        "id": draw(st.text(min_size=1, max_size=20)),
        "key": draw(st.text(min_size=1, max_size=40)),
        "labels": draw(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=4)),
    }
    unit.update(draw(extra_fields))
    return unit


@st.composite
def event_data(draw: st.DrawFn, type_: str) -> dict[str, Any]:
    data: dict[str, Any] = draw(extra_fields)
    if type_ == "unit.exited":
        data.update(code=draw(st.integers(-255, 255)), restarted=draw(st.booleans()))
    elif type_ in ("unit.failed", "unit.destroyed"):
        data["reason"] = draw(st.text(max_size=10))
    elif type_ == "units.scaled":
        data.update({"from": draw(st.integers(0, 500)), "to": draw(st.integers(0, 500))})
        data["reason"] = draw(st.text(max_size=10))
    elif type_ in ("unit.ready", "unit.allocated"):
        data["private_name"] = draw(st.text(max_size=20))
        if draw(st.booleans()):
            data["public_endpoints"] = draw(st.lists(json_values, max_size=2))
    elif type_ == "unit.draining" and draw(st.booleans()):
        data["reason"] = draw(st.sampled_from(["stop", "destroy", "replace", "scale_down", "x"]))
    return data


@st.composite
def valid_events(draw: st.DrawFn) -> dict[str, Any]:
    type_ = draw(st.sampled_from(EVENT_TYPES))
    if type_ == "units.scaled":
        unit = None
    elif type_ in UNIT_OBJECT_TYPES:
        unit = draw(unit_objects())
    else:
        unit = draw(st.none() | unit_objects())
    event = {
        "seq": draw(st.integers(0 if type_ == PING else 1, 2**62)),
        "id": draw(event_ids),
        "type": type_,
        "contract_version": 1,
        "occurred_at": draw(valid_date_times()),
        "service_instance_id": draw(st.text(min_size=1, max_size=12)),
        "unit": unit,
        "data": draw(event_data(type_)),
    }
    event.update(draw(extra_fields))
    return event


@st.composite
def invalid_events(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A valid event with one mutation that the schema forbids; returns (mutation, event)."""
    ev = draw(valid_events())
    t = ev["type"]
    options = [
        "drop", "wrong_type", "seq_negative", "bad_id", "bad_date_time", "contract_version",
        "unit_wrong_type", "data_wrong_type", "empty_type", "empty_service_instance",
    ]  # fmt: skip
    if t != PING:
        options.append("seq_zero")
    if t == "unit.exited":
        options += ["exited_no_code", "exited_bad_code", "exited_bad_restarted"]
    if t in ("unit.failed", "unit.destroyed"):
        options.append("no_reason")
    if t == "units.scaled":
        options += ["scaled_with_unit", "scaled_negative", "scaled_missing"]
    if t in ("unit.ready", "unit.allocated"):
        options.append("no_private_name")
    if t in UNIT_OBJECT_TYPES:
        options.append("unit_null")
    if ev["unit"] is not None:
        options += ["long_key", "empty_key", "label_not_string", "unit_missing_field"]
    m = draw(st.sampled_from(options))
    if m == "drop":
        del ev[draw(st.sampled_from(REQUIRED_EVENT_FIELDS))]
    elif m == "wrong_type":
        field, bad = draw(st.sampled_from([
            ("seq", "1"), ("seq", 1.5), ("seq", True), ("seq", None), ("id", 123),
            ("type", 5), ("contract_version", "1"), ("contract_version", True),
            ("occurred_at", 0), ("occurred_at", None), ("service_instance_id", None),
        ]))  # fmt: skip
        ev[field] = bad
    elif m == "seq_negative":
        ev["seq"] = draw(st.integers(max_value=-1))
    elif m == "seq_zero":
        ev["seq"] = 0
    elif m == "bad_id":
        ev["id"] = draw(st.sampled_from([
            "evt_" + "a" * 31, "evt_" + "a" * 37, "evt_" + "g" * 32, "ev_" + "a" * 32,
            "EVT_" + "a" * 32, "evt_" + "a" * 32 + "\n", " evt_" + "a" * 32, "",
        ]))  # fmt: skip
    elif m == "bad_date_time":
        ev["occurred_at"] = draw(invalid_date_times())
    elif m == "contract_version":
        ev["contract_version"] = draw(st.sampled_from([0, 2, 1.5, "v1"]))
    elif m == "unit_wrong_type":
        ev["unit"] = draw(st.sampled_from(["u", [], 0, False]))
    elif m == "data_wrong_type":
        ev["data"] = draw(st.sampled_from([None, [], "x", 1]))
    elif m == "empty_type":
        ev["type"] = ""
    elif m == "empty_service_instance":
        ev["service_instance_id"] = ""
    elif m == "exited_no_code":
        del ev["data"][draw(st.sampled_from(["code", "restarted"]))]
    elif m == "exited_bad_code":
        ev["data"]["code"] = draw(st.sampled_from(["1", 1.5, None]))
    elif m == "exited_bad_restarted":
        ev["data"]["restarted"] = draw(st.sampled_from(["true", 1, None]))
    elif m == "no_reason":
        if draw(st.booleans()):
            del ev["data"]["reason"]
        else:
            ev["data"]["reason"] = 7
    elif m == "scaled_with_unit":
        ev["unit"] = draw(unit_objects())
    elif m == "scaled_negative":
        ev["data"][draw(st.sampled_from(["from", "to"]))] = -1
    elif m == "scaled_missing":
        del ev["data"][draw(st.sampled_from(["from", "to", "reason"]))]
    elif m == "no_private_name":
        del ev["data"]["private_name"]
    elif m == "unit_null":
        ev["unit"] = None
    elif m == "long_key":
        ev["unit"]["key"] = draw(st.text(min_size=41, max_size=60))
    elif m == "empty_key":
        ev["unit"]["key"] = ""
    elif m == "label_not_string":
        ev["unit"]["labels"]["l"] = draw(st.sampled_from([1, None, True, []]))
    elif m == "unit_missing_field":
        del ev["unit"][draw(st.sampled_from(["id", "key", "labels"]))]
    return m, ev


# --------------------------------------------------------------------------------------------
# UnitSignal spec and status

_KEY_INNER = "abcdefghijklmnopqrstuvwxyz0123456789-"
_LABEL_INNER = "abcdefghijklmnopqrstuvwxyz0123456789_.-"
_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"


def _dns_like(inner: str, max_len: int) -> st.SearchStrategy[str]:
    """Strings matching ^[a-z0-9]([<inner>]*[a-z0-9])?$ up to max_len."""
    single = st.text(_ALNUM, min_size=1, max_size=1)
    longer = st.tuples(
        st.text(_ALNUM, min_size=1, max_size=1),
        st.text(inner, max_size=max_len - 2),
        st.text(_ALNUM, min_size=1, max_size=1),
    ).map("".join)
    return single | longer


endpoints = st.fixed_dictionaries({
    "protocols": st.lists(st.sampled_from(["tcp", "udp", "http"]), max_size=2),
    "internal_port": st.integers(1, 65535),
    "address": st.text(max_size=20),
})  # fmt: skip


@st.composite
def valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "unitId": draw(st.text(min_size=1, max_size=128)),
        "key": draw(_dns_like(_KEY_INNER, 40)),
        "contractVersion": 1,
        "generation": draw(st.integers(0, 2**62)),
    }
    if draw(st.booleans()):
        spec["labels"] = draw(st.dictionaries(
            _dns_like(_LABEL_INNER, 32), st.text(max_size=64), max_size=16
        ))  # fmt: skip
    if draw(st.booleans()):
        spec["userData"] = draw(json_values)
    if draw(st.booleans()):
        allocation = None
        if draw(st.booleans()):
            allocation = {
                "id": draw(st.text(min_size=1, max_size=128)),
                "generation": draw(st.integers(-5, 2**40)),
            }
            if draw(st.booleans()):
                allocation["allocatedAt"] = draw(valid_date_times())
            allocation.update(draw(extra_fields))
        spec["allocation"] = allocation
    if draw(st.booleans()):
        spec["draining"] = draw(
            st.sampled_from([False, "stop", "destroy", "replace", "scale_down"])
        )
    if draw(st.booleans()):
        spec["publicEndpoints"] = draw(st.lists(endpoints, max_size=3))
    spec.update(draw(extra_fields))
    return spec


@st.composite
def invalid_specs(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    spec = draw(valid_specs())
    options = [
        "drop", "bad_key", "long_unit_id", "empty_unit_id", "contract_version",
        "negative_generation", "float_generation", "bad_draining", "too_many_labels",
        "bad_label_name", "bad_label_value", "bad_allocation", "bad_endpoint",
    ]  # fmt: skip
    m = draw(st.sampled_from(options))
    if m == "drop":
        del spec[draw(st.sampled_from(["unitId", "key", "contractVersion", "generation"]))]
    elif m == "bad_key":
        spec["key"] = draw(st.sampled_from([
            "", "A", "a_b", "-a", "a-", "a" * 41, "a\n", "ａ", "a.b", "a b",
        ]))  # fmt: skip
    elif m == "long_unit_id":
        spec["unitId"] = "u" * 129
    elif m == "empty_unit_id":
        spec["unitId"] = draw(st.sampled_from(["", None, 5]))
    elif m == "contract_version":
        spec["contractVersion"] = draw(st.sampled_from([2, 0, "1", True]))
    elif m == "negative_generation":
        spec["generation"] = draw(st.integers(max_value=-1))
    elif m == "float_generation":
        spec["generation"] = draw(st.sampled_from([0.5, "1", None, True]))
    elif m == "bad_draining":
        spec["draining"] = draw(st.sampled_from([True, "other", None, "", 0]))
    elif m == "too_many_labels":
        spec["labels"] = {f"l{i}": "v" for i in range(draw(st.integers(17, 20)))}
    elif m == "bad_label_name":
        spec["labels"] = {draw(st.sampled_from(["", "A", "a" * 33, "-a", "a_", "a\n"])): "v"}
    elif m == "bad_label_value":
        spec["labels"] = {"l": draw(st.sampled_from(["v" * 65, 1, None]))}
    elif m == "bad_allocation":
        spec["allocation"] = draw(st.sampled_from([
            {}, {"id": "a"}, {"generation": 1}, {"id": "", "generation": 1},
            {"id": "a", "generation": "1"}, {"id": "a", "generation": 1, "allocatedAt": 5},
            {"id": "a", "generation": 1, "allocatedAt": "2026-02-30T00:00:00Z"}, "a", False,
        ]))  # fmt: skip
    elif m == "bad_endpoint":
        spec["publicEndpoints"] = [draw(st.sampled_from([
            {"protocols": [], "internal_port": 0, "address": "a"},
            {"protocols": [], "internal_port": 65536, "address": "a"},
            {"protocols": [1], "internal_port": 80, "address": "a"},
            {"protocols": [], "internal_port": 80},
            "tcp:80",
        ]))]  # fmt: skip
    return m, spec


nullable_date_times = st.none() | valid_date_times()
STATUS_FIELDS = tuple(SCHEMAS["unit-signal-status"]["required"])


@st.composite
def valid_statuses(draw: st.DrawFn) -> dict[str, Any]:
    status = {
        "observedGeneration": draw(st.integers(-(2**62), 2**62)),
        "agentVersion": draw(st.text(max_size=12)),
        "signalledReady": draw(nullable_date_times),
        "accepting": draw(st.booleans()),
        "activity": draw(st.sampled_from([None, "idle", "busy"])),
        "activitySince": draw(nullable_date_times),
        "shutdownRequestedAt": draw(nullable_date_times),
        "allocationAck": draw(st.none() | st.text(max_size=12)),
        "seq": draw(st.integers(0, 2**62)),
    }
    status.update(draw(extra_fields))
    return status


@st.composite
def invalid_statuses(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    status = draw(valid_statuses())
    m = draw(st.sampled_from(["drop", "bad_date_time", "wrong_type", "bad_activity", "bad_seq"]))
    if m == "drop":
        del status[draw(st.sampled_from(STATUS_FIELDS))]
    elif m == "bad_date_time":
        field = draw(st.sampled_from(["signalledReady", "activitySince", "shutdownRequestedAt"]))
        status[field] = draw(invalid_date_times() | st.sampled_from([5, False, {}]))
    elif m == "wrong_type":
        field, bad = draw(st.sampled_from([
            ("observedGeneration", "1"), ("observedGeneration", 1.5), ("agentVersion", None),
            ("accepting", None), ("accepting", "true"), ("allocationAck", 5),
        ]))  # fmt: skip
        status[field] = bad
    elif m == "bad_activity":
        status["activity"] = draw(st.sampled_from(["", "Idle", "stopped", True]))
    elif m == "bad_seq":
        status["seq"] = draw(st.sampled_from([-1, "1", None, 0.5]))
    return m, status


# --------------------------------------------------------------------------------------------
# The differential checks


def _verdicts(name: str, instance: Any) -> tuple[bool, bool]:
    """(jsonschema-rs verdict, python-jsonschema verdict); explain() is [] iff python says valid."""
    return validator(name).is_valid(instance), not explain(name, instance)


def _run_differential(name: str, valid: st.SearchStrategy, invalid: st.SearchStrategy) -> None:
    counts: Counter[str] = Counter()

    @SETTINGS
    @given(st.one_of(valid.map(lambda i: ("valid", i)), invalid))
    def check(labelled: tuple[str, Any]) -> None:
        label, instance = labelled
        snapshot = copy.deepcopy(instance)
        rs, py = _verdicts(name, instance)
        assert rs == py, (label, instance, explain(name, instance))
        assert rs == (label == "valid"), (label, instance, explain(name, instance))
        assert instance == snapshot  # validators must not mutate
        counts["valid" if rs else "invalid"] += 1
        counts[label] += 1

    check()
    assert counts["valid"] >= 50 and counts["invalid"] >= 50, counts
    assert len(counts) >= 6, counts  # several mutation kinds were exercised


def test_event_validators_agree() -> None:
    _run_differential("event", valid_events(), invalid_events())


def test_unit_signal_spec_validators_agree() -> None:
    _run_differential("unit-signal-spec", valid_specs(), invalid_specs())


def test_unit_signal_status_validators_agree() -> None:
    _run_differential("unit-signal-status", valid_statuses(), invalid_statuses())


def test_date_time_validators_and_parser_agree() -> None:
    """occurred_at: jsonschema-rs, python-jsonschema and parse_rfc3339_ns give one verdict."""
    base = {
        "seq": 1, "id": "evt_" + "0" * 32, "type": "x", "contract_version": 1,
        "service_instance_id": "s", "unit": None, "data": {},
    }  # fmt: skip
    counts: Counter[str] = Counter()

    @SETTINGS
    @given(
        st.one_of(
            valid_date_times().map(lambda s: (True, s)),
            invalid_date_times().map(lambda s: (False, s)),
            mutated_date_times().map(lambda s: (None, s)),
            st.text(max_size=40).map(lambda s: (None, s)),
        )
    )
    def check(labelled: tuple[bool | None, str]) -> None:
        expected, text = labelled
        event = {**base, "occurred_at": text}
        rs, py = _verdicts("event", event)
        parsed = _parses(text)
        assert rs == py == parsed, (text, rs, py, parsed)
        if expected is not None:
            assert rs == expected, text
        counts[str(expected)] += 1
        counts[f"valid={rs}"] += 1

    check()
    assert counts["valid=True"] >= 50 and counts["valid=False"] >= 50, counts


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-31T23:59:60Z",  # rfc3339-validator alone rejects leap seconds
        "2026-12-31T18:59:60-05:00",
        "0000-01-01T00:00:00Z",  # ... and year 0000
        "2026-03-01t12:34:56.123456789123z",
    ],
)
def test_known_disagreements_are_resolved_valid(text: str) -> None:
    event = {**_valid_event(), "occurred_at": text}
    assert _verdicts("event", event) == (True, True)


@pytest.mark.parametrize(
    "text", ["2026-03-01T12:34:56Z\n", "2026-12-31T12:00:60Z", "2026-12-31T23:59:60+01:00"]
)
def test_known_disagreements_are_resolved_invalid(text: str) -> None:
    event = {**_valid_event(), "occurred_at": text}
    assert _verdicts("event", event) == (False, False)


def test_pattern_dollar_is_end_of_text() -> None:
    """Python's re '$' matches before a final newline; jsonschema-rs's does not."""
    event = {**_valid_event(), "id": "evt_" + "a" * 32 + "\n"}
    assert _verdicts("event", event) == (False, False)
    spec = {"unitId": "u", "key": "a\n", "contractVersion": 1, "generation": 0}
    assert _verdicts("unit-signal-spec", spec) == (False, False)
    spec = {"unitId": "u", "key": "a$", "contractVersion": 1, "generation": 0}
    assert _verdicts("unit-signal-spec", spec) == (False, False)


def test_ecma_dollar_rewrite() -> None:
    assert contract_explain._ecma_dollar("^a$") == r"^a\Z"
    assert contract_explain._ecma_dollar(r"^a\$[$]$") == r"^a\$[$]\Z"
    assert contract_explain._ecma_dollar(r"[\]$]$") == r"[\]$]\Z"


# --------------------------------------------------------------------------------------------
# API


def _valid_event() -> dict[str, Any]:
    return {
        "seq": 7,
        "id": "evt_0b9e4f3c-6a1d-4c2e-9f7a-2d8c1b5e6f70",
        "type": "unit.exited",
        "contract_version": 1,
        "occurred_at": "2026-03-01T12:34:56.123456Z",
        "service_instance_id": "kernel-1",
        "unit": {"id": "u_1", "key": "web-1", "labels": {"tier": "web"}},
        "data": {"code": 0, "restarted": False},
    }


def _valid_status() -> dict[str, Any]:
    status: dict[str, Any] = dict.fromkeys(STATUS_FIELDS)
    status.update(observedGeneration=1, agentVersion="1.0", accepting=True, seq=3)
    return status


def _valid_unit() -> dict[str, Any]:
    return {
        "contract_version": 1,
        "unit_id": "u_1",
        "key": "web-1",
        "labels": {"tier": "web"},
        "origin": "policy",
        "workload": {"id": "w_1", "slug": "web"},
        "project_id": "p_1",
        "region": "eu-1",
        "private_name": "web-1.web",
        "public_endpoints": [{"protocols": ["tcp"], "internal_port": 8080, "address": "a:1"}],
        "incarnation": 0,
        "started_at": "2026-03-01T12:34:56+01:00",
    }


def test_hot_path_callables() -> None:
    event = _valid_event()
    assert is_valid_event(event) is True
    assert is_valid_event({**event, "seq": 0}) is False
    assert is_valid_unit_signal_spec(
        {"unitId": "u", "key": "k", "contractVersion": 1, "generation": 0}
    )
    assert not is_valid_unit_signal_spec({"unitId": "u", "key": "k", "contractVersion": 1})
    status = _valid_status()
    assert is_valid_unit_signal_status(status)
    assert not is_valid_unit_signal_status({**status, "seq": -1})


def test_generic_accessor_covers_every_schema() -> None:
    samples: dict[str, tuple[Any, Any]] = {
        "accepting-request": (True, "true"),
        "allocation": (
            {"id": "a", "allocated_at": "2026-12-31T23:59:60Z", "generation": 1},
            {"id": "a", "allocated_at": "yesterday", "generation": 1},
        ),
        "contract": ({"version": 1, "agent_version": "1.2.3"}, {"version": 2}),
        "error": ({"error": {"code": "x", "message": "y"}}, {"error": {"code": "x"}}),
        "event": (_valid_event(), {}),
        "signal-response": ({"ok": True, "signal": "ready", "changed": False}, {"ok": False}),
        "state": ({"draining": True, "reason": "stop"}, {"draining": True}),
        "unit": (_valid_unit(), {**_valid_unit(), "started_at": "2026-03-01T12:34:56"}),
        "unit-signal-spec": (
            {"unitId": "u", "key": "k", "contractVersion": 1, "generation": 0},
            {"unitId": "u"},
        ),
        "unit-signal-status": (_valid_status(), {**_valid_status(), "activity": "asleep"}),
        "user-data": ({"anything": [1, None]}, None),
    }
    assert set(samples) == set(SCHEMA_NAMES)
    for name in SCHEMA_NAMES:
        assert isinstance(validator(name), jsonschema_rs.Validator)
        assert validator(name) is validator(name)  # built once
        good, bad = samples[name]
        assert is_valid(name, good), (name, explain(name, good))
        assert explain(name, good) == []
        if name != "user-data":
            assert not is_valid(name, bad)
            assert explain(name, bad)
    with pytest.raises(KeyError, match="unknown contract schema"):
        validator("nope")
    with pytest.raises(KeyError, match="unknown contract schema"):
        explain("nope", {})


def test_explain_gives_paths_and_reasons() -> None:
    event = _valid_event()
    event["seq"] = 0
    event["occurred_at"] = "2026-03-01 12:34:56Z"
    event["unit"]["key"] = "k" * 41
    del event["data"]["code"]
    messages = explain("event", event)
    assert not is_valid_event(event)
    assert "$.seq: 0 is less than the minimum of 1" in messages
    assert "$.occurred_at: '2026-03-01 12:34:56Z' is not a 'date-time'" in messages
    assert "$.data: 'code' is a required property" in messages
    # The unit's oneOf failure is explained by its relevant branch, not "not valid under any".
    assert any(m.startswith("$.unit.key: ") and "is too long" in m for m in messages), messages


def test_explain_caps_count_and_length() -> None:
    spec = {
        "unitId": "",
        "key": "BAD",
        "contractVersion": 2,
        "generation": -1,
        "labels": {"l": "v" * 1000},
        "draining": True,
        "publicEndpoints": [{"internal_port": 0}] * 3,
    }
    messages = explain("unit-signal-spec", spec, max_errors=3, max_len=60)
    assert len(messages) == 3
    assert all(len(m) <= 60 for m in messages)
    assert len(explain("unit-signal-spec", spec)) > 3
    big = {**_valid_event(), "data": [{"x": "y" * 10_000}]}
    assert all(len(m) <= 200 for m in explain("event", big))


def test_schemas_are_the_loaded_files() -> None:
    assert tuple(SCHEMAS) == SCHEMA_NAMES
    for name in SCHEMA_NAMES:
        assert SCHEMAS[name]["$id"].endswith(f"/contract/units/v1/{name}.schema.json")
