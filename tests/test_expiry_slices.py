"""The sweep for idle units in slices (wiring/expiry.py `sweep_steps`) expires exactly the units
the one-go sweep does, at the boundary too (a unit idle exactly the idle timeout stays), and
keeps the loop's turns: units touched between slices are judged on their new state."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.model.units import Unit
from exporter.sinks.metrics.family import Registry
from exporter.timestamps import parse_rfc3339_ns
from exporter.wiring.events import Pipeline
from exporter.wiring.expiry import ExpiryClock

NS = 1_000_000_000
IDLE_S = 3600
T0 = 1_700_000_000 * NS  # 2023-11-14T22:13:20Z


def rfc3339(ns: int, style: int) -> str:
    """The same instant written the ways the platform writes it (Z, an offset, digits)."""
    import datetime as dt

    s, frac = divmod(ns, NS)
    off = [0, 0, -5 * 3600, 14 * 3600, 2 * 3600 + 1800][style % 5]
    t = dt.datetime.fromtimestamp(s + off, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = ["", f".{frac:09d}", f".{frac // 1000:06d}", f".{frac // 1000000:03d}"][style % 4]
    if style % 4 and frac % {1: 1, 2: 1000, 3: 1000000}[style % 4]:
        digits = f".{frac:09d}"  # never round an instant away: the boundary must be exact
    if not style % 4 and frac:
        digits = f".{frac:09d}"
    zone = "Z" if off == 0 else f"{'+' if off > 0 else '-'}{abs(off) // 3600:02d}:" \
        f"{abs(off) % 3600 // 60:02d}"
    return t + digits + zone


# A unit's idle time against the limit: well inside, well past, and around the boundary.
idles = st.one_of(st.integers(0, 2 * IDLE_S * NS),
                  st.sampled_from([IDLE_S * NS - 1, IDLE_S * NS, IDLE_S * NS + 1]))
workloads = st.lists(st.lists(st.tuples(idles, st.integers(0, 19)), max_size=40),
                     min_size=1, max_size=4)


def pipeline_of(spec: list[list[tuple[int, int]]], now: int) -> Pipeline:
    p = Pipeline(Registry(native=None), idle_seconds=IDLE_S)
    for w, units in enumerate(spec):
        wl = p.workload(f"w{w}")
        wl.last_at = rfc3339(now, 0)  # the event clock: the sweep's `now` (not caught up)
        for i, (idle, style) in enumerate(units):
            at = rfc3339(now - idle, style)
            assert parse_rfc3339_ns(at) == now - idle
            wl.units[f"u{i}"] = Unit(at)
    return p


def state(p: Pipeline) -> dict[str, tuple[list[str], int]]:
    return {n: (sorted(wl.units), wl.expired) for n, wl in p.logs.items()}


@settings(max_examples=150, deadline=None)
@given(workloads, st.integers(1, 17))
def test_slices_expire_what_one_sweep_does(spec, slice_units):
    now = T0 + 123_456_789
    one, sliced = pipeline_of(spec, now), pipeline_of(spec, now)
    ExpiryClock().sweep(one, lambda n: False, now)
    steps = sum(1 for _ in ExpiryClock().sweep_steps(sliced, lambda n: False, now, slice_units))
    assert state(sliced) == state(one)
    total = sum(len(u) for u in spec)
    assert steps == total // slice_units  # it did yield: one turn per full slice
    # The boundary: idle exactly the timeout is not yet idle for longer than it.
    for w, units in enumerate(spec):
        kept = set(one.logs[f"w{w}"].units)
        for i, (idle, _) in enumerate(units):
            assert (f"u{i}" in kept) == (idle <= IDLE_S * NS), (idle, IDLE_S * NS)


def test_a_unit_touched_between_slices_is_judged_on_its_new_state():
    now = T0
    p = pipeline_of([[(2 * IDLE_S * NS, 0)] * 10], now)
    wl = p.logs["w0"]
    steps = ExpiryClock().sweep_steps(p, lambda n: False, now, 4)
    next(steps)  # the first 4 judged (and expired); the loop runs
    assert wl.expired == 4
    wl.units["u9"].last = rfc3339(now, 1)  # an event for it meanwhile
    wl.units["new"] = Unit(rfc3339(now - 2 * IDLE_S * NS, 0))  # created meanwhile: next sweep
    del wl.units["u5"]  # destroyed meanwhile: not counted as expired
    for _ in steps:
        pass
    assert sorted(wl.units) == ["new", "u9"]
    assert wl.expired == 8
