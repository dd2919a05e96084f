"""exporter.timestamps: exact RFC 3339 parsing, including the memoised fast path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter import timestamps
from exporter.timestamps import format_ns, parse_rfc3339_ns

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NS = 1_000_000_000


def _ns_of(dt: datetime) -> int:
    """Exact epoch ns of an aware datetime (timedelta floor division is integer arithmetic)."""
    return (dt - EPOCH) // timedelta(microseconds=1) * 1000


def _offset_text(minutes: int, data: st.DataObject) -> str:
    if minutes == 0:
        return data.draw(st.sampled_from(["Z", "z", "+00:00", "-00:00"]))
    sign = "-" if minutes < 0 else "+"
    h, m = divmod(abs(minutes), 60)
    return f"{sign}{h:02d}:{m:02d}"


def _fraction_text(micro: int, data: st.DataObject) -> str:
    """Every way to write a microsecond fraction: none, trimmed, 6 digits, zero-padded."""
    six = f"{micro:06d}"
    forms = [six, six + "0" * data.draw(st.integers(1, 12))]
    if micro == 0:
        forms.append("")
    else:
        forms.append(six.rstrip("0"))
    frac = data.draw(st.sampled_from(forms))
    return "." + frac if frac else ""


@given(
    local=st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)),
    offset_minutes=st.integers(-(23 * 60 + 59), 23 * 60 + 59),
    data=st.data(),
)
def test_matches_datetime_for_microsecond_strings(
    local: datetime, offset_minutes: int, data: st.DataObject
) -> None:
    sep = data.draw(st.sampled_from("Tt"))
    text = (
        f"{local.year:04d}-{local.month:02d}-{local.day:02d}{sep}"
        f"{local.hour:02d}:{local.minute:02d}:{local.second:02d}"
        f"{_fraction_text(local.microsecond, data)}{_offset_text(offset_minutes, data)}"
    )
    aware = local.replace(tzinfo=timezone(timedelta(minutes=offset_minutes)))
    assert parse_rfc3339_ns(text) == _ns_of(aware)
    assert parse_rfc3339_ns(text) == _ns_of(aware)  # memoised path gives the same answer


@given(st.integers(min_value=parse_rfc3339_ns("0000-01-01T00:00:00Z"), max_value=2**63))
def test_format_ns_round_trips(ns: int) -> None:
    text = format_ns(ns)
    assert len(text) == 30 and text.endswith("Z")
    assert parse_rfc3339_ns(text) == ns


def test_format_ns_examples() -> None:
    assert format_ns(0) == "1970-01-01T00:00:00.000000000Z"
    assert format_ns(-1) == "1969-12-31T23:59:59.999999999Z"
    assert format_ns(1_772_368_496_123_456_789) == "2026-03-01T12:34:56.123456789Z"
    with pytest.raises(ValueError):
        format_ns(parse_rfc3339_ns("0000-01-01T00:00:00Z") - 1)
    with pytest.raises(ValueError):
        format_ns(parse_rfc3339_ns("9999-12-31T23:59:59.999999999Z") + 1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-01T12:34:56.1234567Z", 1_772_368_496_123_456_700),
        ("2026-03-01T12:34:56.12345678Z", 1_772_368_496_123_456_780),
        ("2026-03-01T12:34:56.123456789Z", 1_772_368_496_123_456_789),
        ("2026-03-01T12:34:56.123456789999Z", 1_772_368_496_123_456_789),  # truncated
        ("2026-03-01T12:34:56.000000001z", 1_772_368_496_000_000_001),
        ("2026-03-01T13:34:56.987654321+01:00", 1_772_368_496_987_654_321),
        ("1970-01-01T00:00:00.000000001Z", 1),
        ("1969-12-31T23:59:59.999999999Z", -1),
        ("1969-12-31T23:59:59.9999999999Z", -1),  # truncation floors toward the past
        ("0000-01-01T00:00:00Z", -62_167_219_200 * NS),
        ("0000-02-29T00:00:00Z", (-62_167_219_200 + 59 * 86_400) * NS),  # year 0 is leap
        ("9999-12-31T23:59:59.999999999Z", 253_402_300_799_999_999_999),
        ("2026-01-01T00:00:00+23:59", parse_rfc3339_ns("2025-12-31T00:01:00Z")),
        ("2026-01-01T00:00:00-23:59", parse_rfc3339_ns("2026-01-01T23:59:00Z")),
    ],
)
def test_exact_nanoseconds(text: str, expected: int) -> None:
    assert parse_rfc3339_ns(text) == expected
    assert parse_rfc3339_ns(text) == expected


@pytest.mark.parametrize(
    ("text", "same_as"),
    [
        ("2016-12-31T23:59:60Z", "2017-01-01T00:00:00Z"),
        ("2016-12-31T23:59:60.5Z", "2017-01-01T00:00:00.5Z"),
        ("2016-12-31t23:59:60.999999999z", "2017-01-01T00:00:00.999999999Z"),
        ("2016-12-31T18:59:60-05:00", "2017-01-01T00:00:00Z"),
        ("2017-01-01T00:59:60+01:00", "2017-01-01T00:00:00Z"),
        ("2026-06-30T23:59:60-00:00", "2026-07-01T00:00:00Z"),
        ("2026-03-15T23:59:60Z", "2026-03-16T00:00:00Z"),  # any day, as jsonschema-rs accepts
    ],
)
def test_leap_second_is_the_next_second(text: str, same_as: str) -> None:
    assert parse_rfc3339_ns(text) == parse_rfc3339_ns(same_as)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2026-03-01",
        "2026-03-01T12:34Z",
        "2026-03-01 12:34:56Z",  # space separator
        "2026-03-01_12:34:56Z",
        "2026-03-01T12:34:56",  # no offset
        "2026-03-01T12:34:56.123",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-01-32T00:00:00Z",
        "2026-01-00T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-02-29T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2026-01-01T24:00:00Z",
        "2026-01-01T00:60:00Z",
        "2026-01-01T00:00:61Z",
        "2026-01-01T00:00:99Z",
        "2026-12-31T12:59:60Z",  # leap second not at 23:59 UTC
        "2026-12-31T23:58:60Z",
        "2026-12-31T23:59:60+01:00",  # 22:59:60 UTC
        "2026-01-01T00:00:00+24:00",
        "2026-01-01T00:00:00+99:00",
        "2026-01-01T00:00:00+05:60",
        "2026-01-01T00:00:00+0500",
        "2026-01-01T00:00:00+05",
        "2026-01-01T00:00:00+5:00",
        "2026-01-01T00:00:00+05:00:00",
        "2026-01-01T00:00:00*05:00",
        "2026-01-01T00:00:00−05:00",  # U+2212 minus
        "2026-01-01T00:00:00.Z",
        "2026-01-01T00:00:00.+01:00",
        "2026-01-01T00:00:00,5Z",
        "2026-01-01T00:00:00.5 Z",
        "2026-01-01T00:00:00.-5Z",
        "2026-01-01T00:00:00.+5Z",
        "2026-01-01T00:00:00.1_0Z",
        "2026-01-01T00:00:00.١٢٣Z",  # Arabic-Indic digits: int() would accept them
        "٢٠٢٦-01-01T00:00:00Z",
        "2026-01-01T00:00:00Z5Z",
        "2026-01-01T00:00:00ZZ",
        "2026-01-01T00:00:00Z ",
        "2026-01-01T00:00:00Z\n",
        " 2026-01-01T00:00:00Z",
        "2026-1-01T00:00:00Z",
        "2026-01-01T0:00:00Z",
        "12026-01-01T00:00:00Z",
        "+2026-01-01T00:00:00Z",
        "2026-01-01T00:00:+1Z",
        "2026-01-01T00:00:0 Z",
        "2026-01-01T 0:00:00Z",
        "2026/01/01T00:00:00Z",
        "2026-01-01T00-00-00Z",
    ],
)
def test_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rfc3339_ns(text)


@pytest.mark.parametrize(
    "prime",
    [
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00.5Z",
        "2026-01-01T00:00:00+01:00",
        "2026-01-01T00:00:00.5+01:00",
    ],
)
def test_rejects_after_a_valid_string_primed_the_cache(prime: str) -> None:
    """A memo hit must not let a malformed tail through."""
    parse_rfc3339_ns(prime)
    for text in [
        "2026-01-01T00:00:00Z5Z",
        "2026-01-01T00:00:00.Z",
        "2026-01-01T00:00:00.5x5Z",
        "2026-01-01T00:00:00.١Z",
        "2026-01-01T00:00:00.12x456Z",  # 3- and 6-digit fractions take a table-lookup path
        "2026-01-01T00:00:00.١٢٣٤٥٦Z",
        "2026-01-01T00:00:00.1 3Z",
        "2026-01-01T00:00:00.-12Z",
        "2026-01-01T00:00:00.12345x+01:00",
        "2026-01-01T00:00:00.12345678x+01:00",
        "2026-01-01T00:00:00.+01:00",
        "2026-01-01T00:00:00.5+01:60",
        "2026-01-01T00:00:00.5+01:00Z",
        "2026-01-01T00:00:00+01:005",
    ]:
        with pytest.raises(ValueError):
            parse_rfc3339_ns(text)


def test_cache_does_not_change_results() -> None:
    utc = parse_rfc3339_ns("2026-03-01T12:34:56.25Z")
    for text in [
        "2026-03-01T12:34:56.25Z",
        "2026-03-01t12:34:56.25z",
        "2026-03-01T12:34:56.25+00:00",
        "2026-03-01T12:34:56.25-00:00",
        "2026-03-01T12:34:56.250000000000Z",
    ]:
        assert parse_rfc3339_ns(text) == utc
        assert parse_rfc3339_ns(text) == utc
    # Same date/time prefix, different offsets: must not share a memo entry.
    seen = set()
    for offset in ["+01:00", "-01:00", "+05:30", "-05:30", "+23:59", "Z"]:
        text = f"2026-03-01T12:34:56.25{offset}"
        first = parse_rfc3339_ns(text)
        assert parse_rfc3339_ns(text) == first
        seen.add(first)
    assert len(seen) == 6
    assert parse_rfc3339_ns("2026-03-01T12:34:56.25+01:00") == utc - 3600 * NS
    assert parse_rfc3339_ns("2026-03-01T12:34:56+01:00") == utc - 3600 * NS - NS // 4
    # Different fractions after the same second.
    whole = parse_rfc3339_ns("2026-03-01T12:34:56Z")
    assert parse_rfc3339_ns("2026-03-01T12:34:56.5Z") - whole == NS // 2


def test_cache_is_bounded_and_survives_clearing() -> None:
    texts = [
        f"2026-03-{1 + i // 1440:02d}T{i // 60 % 24:02d}:{i % 60:02d}:{i % 59:02d}.{i}Z"
        for i in range(3 * timestamps._CACHE_MAX)
    ]
    first = [parse_rfc3339_ns(t) for t in texts]
    for cache in (timestamps._sec, timestamps._whole, timestamps._min_utc, timestamps._min_off):
        assert len(cache) <= timestamps._CACHE_MAX
    assert [parse_rfc3339_ns(t) for t in texts] == first
    assert first == sorted(first) and len(set(first)) == len(first)


def test_invalid_strings_are_not_memoised() -> None:
    for _ in range(2):
        with pytest.raises(ValueError):
            parse_rfc3339_ns("2026-02-30T00:00:00.5Z")
    with pytest.raises(ValueError):
        parse_rfc3339_ns("2026-02-30T00:00:00Z")


def test_whole_seconds_of_a_known_minute_take_the_fast_path_correctly() -> None:
    base = parse_rfc3339_ns("2026-03-01T12:34:56Z")
    assert parse_rfc3339_ns("2026-03-01T12:34:07Z") == base - 49 * 10**9
    assert parse_rfc3339_ns("2026-03-01t12:34:00z") == base - 56 * 10**9
    for bad in ("2026-03-01T12:34:6xZ", "2026-03-01T12:34:61Z", "2026-03-01T12:34:-1Z"):
        with pytest.raises(ValueError):
            parse_rfc3339_ns(bad)


def _cold(text: str) -> int:
    """The slow path's answer, every memo cleared first."""
    for cache in (timestamps._sec, timestamps._whole, timestamps._min_utc, timestamps._min_off):
        cache.clear()
    return parse_rfc3339_ns(text)


@pytest.mark.parametrize("tail", ["Z", "z", "+01:00", "-05:30"])
def test_fractional_new_seconds_of_a_known_minute_take_the_fast_path_correctly(tail) -> None:
    """A new second with a fraction, in a minute (and offset) already parsed: the minute's memo
    and a table lookup of the seconds, with the same results and rejections as the slow path."""
    parse_rfc3339_ns(f"2026-03-01T12:34:56.5{tail}")  # primes the minute
    for sec in ("00", "07", "59"):
        for frac in ("1", "123", "123456", "123456789", "1234567891"):
            text = f"2026-03-01T12:34:{sec}.{frac}{tail}"
            fast = parse_rfc3339_ns(text)
            assert fast == _cold(text), text
            parse_rfc3339_ns(f"2026-03-01T12:34:56.5{tail}")
    for bad in ("6x", "61", "60", "-1", "٠١"):
        parse_rfc3339_ns(f"2026-03-01T12:34:56.5{tail}")
        with pytest.raises(ValueError):
            parse_rfc3339_ns(f"2026-03-01T12:34:{bad}.5{tail}")
    for bad_frac in ("", "5x", "١", "12x456"):
        parse_rfc3339_ns(f"2026-03-01T12:34:56.5{tail}")
        with pytest.raises(ValueError):
            parse_rfc3339_ns(f"2026-03-01T12:34:07.{bad_frac}{tail}")


def test_a_leap_second_with_a_fraction_after_its_minute_was_memoised() -> None:
    parse_rfc3339_ns("2026-12-31T23:59:58.5Z")
    assert parse_rfc3339_ns("2026-12-31T23:59:60.5Z") == _cold("2027-01-01T00:00:00.5Z")
    parse_rfc3339_ns("2026-12-31T12:59:58.5Z")
    with pytest.raises(ValueError):
        parse_rfc3339_ns("2026-12-31T12:59:60.5Z")
