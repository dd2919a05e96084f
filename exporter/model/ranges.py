"""The values the model and the checkpoint's store can hold, checked where input enters the model.

The contract bounds neither integers (`seq`, `units.scaled`'s `to`, generations, `status.seq`)
nor dates (`format: date-time` runs from year 0000 to 9999, with offsets). The model keeps time
as integer nanoseconds since the Unix epoch and the store (SQLite) holds signed 64-bit integers,
so a value valid per the contract can still be one neither can hold: `occurred_at` in 2300 is
2^63 ns and more. Such a value is refused where it enters the model (counted, never stored),
instead of raising later in a save, a render or a span, where it would stop the exporter.

- Clock: 1970-01-01T00:00:00Z through 2262-04-11T23:47:16.854775807Z UTC (0 to 2^63 - 1 ns):
  the store's integers, OTLP's unsigned span times, and 0 as "no event yet".
- Integers: signed 64-bit; a seq at most 2^63 - 2, so that the next one is still one.

Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from typing import Any

from exporter.timestamps import format_ns, parse_rfc3339_ns

__all__ = ["CLOCK_MAX_NS", "CLOCK_MIN_NS", "INT_MAX", "INT_MIN", "SEQ_MAX", "clock_fits",
           "clock_ns", "int_fits"]

INT_MAX = 2**63 - 1
INT_MIN = -(2**63)
SEQ_MAX = INT_MAX - 1
CLOCK_MIN_NS = 0
CLOCK_MAX_NS = INT_MAX
FIRST = format_ns(CLOCK_MIN_NS)
LAST = format_ns(CLOCK_MAX_NS)


def int_fits(v: Any) -> bool:
    """An integer the store can hold (anything else: True, its type is checked elsewhere)."""
    return type(v) is not int or INT_MIN <= v <= INT_MAX


def clock_ns(at: Any) -> int | None:
    """Epoch ns of an RFC 3339 `date-time` within the model's clock; None when it is none or
    outside it."""
    if type(at) is not str:
        return None
    try:
        ns = parse_rfc3339_ns(at)
    except ValueError:
        return None
    return ns if CLOCK_MIN_NS <= ns <= CLOCK_MAX_NS else None


def clock_fits(at: str) -> bool:
    """Whether a valid `date-time` is within the model's clock. Years 1971-2261 are, whatever
    their offset (at most a day): a string comparison, no parse, on the hot path."""
    if "1971" < at < "2262":
        return True
    return clock_ns(at) is not None
