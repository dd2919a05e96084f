"""Exact RFC 3339 ``date-time`` <-> epoch nanoseconds, fast enough for the event-replay hot path.

Why not ``datetime.fromisoformat``: it keeps only microseconds, rejects leap seconds and accepts
non-RFC 3339 forms (space separator, missing offset, ``+HHMM``); a float would lose nanoseconds.

Acceptance matches ``format: date-time`` as jsonschema-rs asserts it (``exporter.contract`` relies
on this so that the schema validator and this parser never disagree):

- ``YYYY-MM-DD`` (``T``|``t``) ``HH:MM:SS`` [``.`` 1+ digits] (``Z``|``z``|``+HH:MM``|``-HH:MM``),
  ASCII digits only, years 0000-9999 (proleptic Gregorian), real calendar dates.
- Fraction digits beyond the 9th are truncated (floor toward the past).
- Second ``60`` is a leap second and is only valid when the UTC time is ``23:59`` (any day, as in
  the JSON Schema test suite); it is taken arithmetically, i.e. equal to the next day's 00:00:00.

The module is pure: no I/O, no clock reads. The only state is a bounded memo of prefix epochs.
"""

from __future__ import annotations

__all__ = ["format_ns", "parse_rfc3339_ns"]

_NS = 1_000_000_000
_DAY_S = 86_400
_CACHE_MAX = 4096
# 10 ** (9 - n) for a fraction of n < 9 digits, indexed by n.
_FRAC_SCALE: tuple[int, ...] = tuple(10 ** (9 - n) for n in range(10))
_D3 = {f"{i:03d}": i for i in range(1000)}
_DAYS_IN_MONTH = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

# Bounded memos, cleared when full (cheaper than LRU bookkeeping; a replay's timestamps cluster in
# time, so the working set is small). Values are UTC epoch ns.
# _sec: "YYYY-MM-DDTHH:MM:SS." (Z/z strings, 20 chars) and "YYYY-MM-DDTHH:MM:SS.+HH:MM" (offset
#       strings, 26 chars) -> ns of that second. _whole: fraction-less strings -> their ns.
#       Both filled only by _parse_slow after full validation, so a hit proves that part valid.
#       Kept apart because a whole "...SSZ" key would otherwise match s[:20] of "...SSZ5Z".
# _min_utc / _min_off: "YYYY-MM-DDTHH:MM:" (+ "+HH:MM") -> ns of HH:MM:00, so that a miss in _sec
#       (a new second) costs little more than parsing the seconds.
_sec: dict[str, int] = {}
_whole: dict[str, int] = {}
_min_utc: dict[str, int] = {}
# "00".."59" -> ns: a lookup that also validates (":60", a leap second, takes the slow path).
_S2 = {f"{i:02d}": i * 1_000_000_000 for i in range(60)}
_min_off: dict[str, int] = {}


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant), exact for any year."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m - 3 if m > 2 else m + 9) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def _civil_from_days(z: int) -> tuple[int, int, int]:
    """Inverse of :func:`_days_from_civil`."""
    z += 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (m <= 2), m, d


def _prefix_ns(s: str, offset_s: int) -> int:
    """Validate ``YYYY-MM-DDTHH:MM:`` (s[:17]) and return the UTC epoch ns of HH:MM:00."""
    if s[4] != "-" or s[7] != "-" or s[10] not in "Tt" or s[13] != ":" or s[16] != ":":
        raise ValueError(f"not an RFC 3339 date-time: {s!r}")
    ys, ms, ds, hs, mins = s[0:4], s[5:7], s[8:10], s[11:13], s[14:16]
    if not (ys.isdigit() and ms.isdigit() and ds.isdigit() and hs.isdigit() and mins.isdigit()):
        raise ValueError(f"not an RFC 3339 date-time: {s!r}")
    y, m, d, hh, mm = int(ys), int(ms), int(ds), int(hs), int(mins)
    if not 1 <= m <= 12:
        raise ValueError(f"month out of range in {s!r}")
    dim = _DAYS_IN_MONTH[m]
    if m == 2 and y % 4 == 0 and (y % 100 != 0 or y % 400 == 0):
        dim = 29
    if not 1 <= d <= dim:
        raise ValueError(f"day out of range in {s!r}")
    if hh > 23 or mm > 59:
        raise ValueError(f"time out of range in {s!r}")
    return (_days_from_civil(y, m, d) * _DAY_S + hh * 3600 + mm * 60 - offset_s) * _NS


def _offset_s(off: str, s: str) -> int:
    """Seconds east of UTC of a ``+HH:MM``/``-HH:MM`` suffix (``-00:00`` is UTC)."""
    sign, oh, colon, om = off[0], off[1:3], off[3], off[4:6]
    if sign not in "+-" or colon != ":" or not (oh.isdigit() and om.isdigit()):
        raise ValueError(f"bad UTC offset in {s!r}")
    h, m = int(oh), int(om)
    if h > 23 or m > 59:
        raise ValueError(f"UTC offset out of range in {s!r}")
    secs = h * 3600 + m * 60
    return -secs if sign == "-" else secs


def _parse_slow(s: str) -> int:
    """Full validation and parse; memoises the minute and second prefixes for the fast path."""
    n = len(s)
    if n < 20 or not s.isascii():
        raise ValueError(f"not an RFC 3339 date-time: {s!r}")
    last = s[-1]
    if last == "Z" or last == "z":
        end = n - 1
        key = s[:17]
        base = _min_utc.get(key)
        if base is None:
            base = _prefix_ns(s, 0)
            if len(_min_utc) >= _CACHE_MAX:
                _min_utc.clear()
            _min_utc[key] = base
    else:
        end = n - 6
        if end < 19:
            raise ValueError(f"not an RFC 3339 date-time: {s!r}")
        key = s[:17] + s[end:]
        base = _min_off.get(key)
        if base is None:
            base = _prefix_ns(s, _offset_s(s[end:], s))
            if len(_min_off) >= _CACHE_MAX:
                _min_off.clear()
            _min_off[key] = base
    sec = s[17:19]
    if not sec.isdigit():
        raise ValueError(f"not an RFC 3339 date-time: {s!r}")
    secs = int(sec)
    if secs > 59 and (secs > 60 or (base // _NS // 60) % 1440 != 1439):
        # :60 is a leap second only at 23:59 UTC (after applying the offset).
        raise ValueError(f"second out of range in {s!r}")
    base += secs * _NS
    if end == 19:
        if len(_whole) >= _CACHE_MAX:
            _whole.clear()
        _whole[s] = base
        return base
    frac = s[20:end]
    if s[19] != "." or not frac.isdigit():
        raise ValueError(f"not an RFC 3339 date-time: {s!r}")
    if len(_sec) >= _CACHE_MAX:
        _sec.clear()
    _sec[s[:20] if end == n - 1 else s[:20] + s[end:]] = base
    if len(frac) >= 9:
        return base + int(frac[:9])
    return base + int(frac) * _FRAC_SCALE[len(frac)]


def _remember_sec(key: str, ns: int) -> int:
    if len(_sec) >= _CACHE_MAX:
        _sec.clear()
    _sec[key] = ns
    return ns


def parse_rfc3339_ns(s: str) -> int:
    """Epoch nanoseconds of an RFC 3339 ``date-time``; ``ValueError`` if it is not one.

    Exact integer arithmetic only. Everything up to the seconds (plus the offset) is memoised,
    because a replay parses many timestamps that share it; only the fraction is parsed per call,
    with a table lookup per 3 digits for ms and µs (cheaper than ``int()`` for up to 6 digits).
    """
    try:
        last = s[-1]
    except IndexError:
        raise ValueError("empty string is not an RFC 3339 date-time") from None
    if last == "Z" or last == "z":
        n = len(s) - 21  # fraction digits, if s[19] is "."
        if n == -1:
            base = _whole.get(s)
            if base is not None:
                return base
            # Whole seconds (API server and agent timestamps): a new second of a known minute.
            minute = _min_utc.get(s[:17])  # a hit proves s[:17] a valid "YYYY-MM-DDTHH:MM:"
            if minute is not None:
                sec = _S2.get(s[17:19])
                if sec is not None:
                    return minute + sec
            return _parse_slow(s)
        base = _sec.get(s[:20])  # a hit proves s[:20] is a valid "YYYY-MM-DDTHH:MM:SS."
        if base is None and n >= 0 and s[19] == ".":
            # A new second of a known minute: the minute's hit proves s[:17] valid, _S2 the
            # seconds (":60", a leap second, takes the slow path).
            minute = _min_utc.get(s[:17])
            if minute is not None:
                sec = _S2.get(s[17:19])
                if sec is not None:
                    base = _remember_sec(s[:20], minute + sec)
    else:
        n = len(s) - 26
        if n == -1:
            base = _whole.get(s)
            return _parse_slow(s) if base is None else base
        # A hit also proves the offset valid. If len(s) < 26 the slices overlap and cannot form a
        # stored key: s[-6] would fall on a digit, ":" or "." instead of the offset's sign.
        base = _sec.get(s[:20] + s[-6:])
        if base is None and n >= 0 and s[19] == ".":
            # A new second of a known minute and offset (see the Z case above).
            minute = _min_off.get(s[:17] + s[-6:])
            if minute is not None:
                sec = _S2.get(s[17:19])
                if sec is not None:
                    base = _remember_sec(s[:20] + s[-6:], minute + sec)
    if base is None:
        return _parse_slow(s)
    try:  # _D3 holds ASCII digit triples only, so a lookup also validates
        if n == 6:
            return base + _D3[s[20:23]] * 1_000_000 + _D3[s[23:26]] * 1_000
        if n == 3:
            return base + _D3[s[20:23]] * 1_000_000
    except KeyError:
        raise ValueError(f"not an RFC 3339 date-time: {s!r}") from None
    frac = s[20 : 20 + n]
    if not (frac.isdigit() and s.isascii()):  # isdigit alone accepts non-ASCII digits
        raise ValueError(f"not an RFC 3339 date-time: {s!r}")
    if n >= 9:
        return base + int(frac[:9])
    return base + int(frac) * _FRAC_SCALE[n]


_MIN_NS = _days_from_civil(0, 1, 1) * _DAY_S * _NS
_MAX_NS = _days_from_civil(10_000, 1, 1) * _DAY_S * _NS


def format_ns(ns: int) -> str:
    """Canonical UTC RFC 3339 form with 9 fraction digits, e.g. ``2026-03-01T12:34:56.123456789Z``.

    Round-trips through :func:`parse_rfc3339_ns`. ``ValueError`` outside years 0000-9999, which
    RFC 3339 cannot represent.
    """
    if not _MIN_NS <= ns < _MAX_NS:
        raise ValueError(f"{ns} ns is outside RFC 3339's years 0000-9999")
    secs, frac = divmod(ns, _NS)
    days, sod = divmod(secs, _DAY_S)
    y, m, d = _civil_from_days(days)
    hh, rem = divmod(sod, 3600)
    mm, ss = divmod(rem, 60)
    return f"{y:04d}-{m:02d}-{d:02d}T{hh:02d}:{mm:02d}:{ss:02d}.{frac:09d}Z"
