"""RFC 3339 rendering of integer epoch nanoseconds, in every legal form.

A time is floored to the fraction digits it is rendered with before it is used anywhere, so the
string and the integer the ground truth uses are the same instant: truth stays exact in ns and
does not depend on how a consumer parses fractions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

_EPOCH = datetime(1970, 1, 1)
_NS = 1_000_000_000

# Weights favour the common forms (UTC, 3/6/9 digits) but keep every other one in the mix.
_DIGITS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
_DIGIT_WEIGHTS = (1, 1, 1, 6, 1, 1, 5, 1, 1, 4)
_OFFSETS_MIN = (0, 60, 120, 330, 345, 840, -300, -330, -600, -720)


@dataclass(frozen=True)
class TimeForm:
    """How one timestamp is written: digits, offset and letter case."""

    digits: int = 9
    offset_min: int | None = None  # None: UTC written as Z/z; else minutes east of UTC
    lower_z: bool = False
    lower_t: bool = False
    negative_zero: bool = False  # "-00:00" (RFC 3339: UTC, local offset unknown)

    def with_digits(self, digits: int) -> TimeForm:
        return TimeForm(digits, self.offset_min, self.lower_z, self.lower_t, self.negative_zero)


def floor_ns(t_ns: int, digits: int) -> int:
    """Floor t_ns to what `digits` fraction digits can express."""
    step: int = 10 ** (9 - digits)  # (digits <= 9)
    return t_ns - t_ns % step


def render(t_ns: int, form: TimeForm) -> str:
    """Render t_ns (already floored to form.digits) as RFC 3339; local time = UTC + offset."""
    if floor_ns(t_ns, form.digits) != t_ns:
        raise ValueError("time not floored to the rendered digits")
    secs, frac = divmod(t_ns, _NS)
    offset = form.offset_min or 0
    local = _EPOCH + timedelta(seconds=secs + offset * 60)
    text = local.strftime("%Y-%m-%d") + ("t" if form.lower_t else "T") + local.strftime("%H:%M:%S")
    if form.digits:
        text += "." + f"{frac:09d}"[: form.digits]
    if form.offset_min is None:
        return text + ("z" if form.lower_z else "Z")
    sign = "-" if offset < 0 or (offset == 0 and form.negative_zero) else "+"
    hours, minutes = divmod(abs(offset), 60)
    return f"{text}{sign}{hours:02d}:{minutes:02d}"


def random_form(rng: random.Random) -> TimeForm:
    """A form drawn from a realistic mix: mostly `Z` with ms/µs/ns, sometimes anything legal."""
    digits = rng.choices(_DIGITS, _DIGIT_WEIGHTS)[0]
    roll = rng.random()
    if roll < 0.6:
        return TimeForm(digits)
    if roll < 0.7:
        return TimeForm(digits, lower_z=True, lower_t=rng.random() < 0.5)
    offset = rng.choice(_OFFSETS_MIN)
    return TimeForm(
        digits,
        offset_min=offset,
        lower_t=rng.random() < 0.2,
        negative_zero=offset == 0 and rng.random() < 0.3,
    )
