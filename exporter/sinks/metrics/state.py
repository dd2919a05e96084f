"""Counter and histogram values as plain data, so a restarted exporter continues from them.

Counters that restart at zero are only added up correctly by the one scraper that saw the old
process's last value: a second Prometheus replica, or any scrape lost with the process, misses
what came between. Restoring every counter and histogram (counts, buckets, exact sums) from the
checkpoint makes the new process's values continue the old ones, so any scraper reads the same
totals and never sees a reset. The checkpoint's own save counters are left out: saving changes
them, and they describe this process's writes.

A checkpoint stores only the series that changed since the last one: `track` starts each kept
family's `changed` list (series.py appends a series to it at its first change after a save,
O(1)), and `take_changes` turns it into rows to write and rows to delete.
"""

from __future__ import annotations

import json
from typing import Any, TypeGuard

import orjson

from exporter.catalog import Kind
from exporter.sinks.metrics.family import AnyFamily, Family, Registry
from exporter.sinks.metrics.series import CallbackSeries, HistogramSeries, Series

# Gauges whose value comes from the event log (a units.scaled event), not from this process.
EVENT_GAUGES = frozenset({"zaroz_workload_desired_units"})
NOT_RESTORED = frozenset({"zaroz_checkpoint_saves_total"})

# One stored series: (family, label values as a JSON list, value or None, histogram or None).
Row = tuple[str, str, float | None, str | None]


def json_text(value: object) -> str:
    """JSON as text: orjson's bytes keep a 4 KiB buffer each, however short (100k rows held
    for one save were 140 MiB). An integer beyond 64 bits (orjson refuses it; one can only be
    in an event's free-form data) takes the standard library's encoder instead of failing
    every save from then on."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_I64 = range(-(2**63), 2**63)


def _sum(sum_ns: int) -> int | str:
    """A histogram's exact sum, as a decimal string once it outgrows 64 bits (durations of up to
    292 years each add up): `HistogramSeries.restore` takes either."""
    return sum_ns if sum_ns in _I64 else str(sum_ns)


def _kept(fam: object) -> TypeGuard[AnyFamily]:
    if not isinstance(fam, Family) or fam.metric.name in NOT_RESTORED:
        return False
    kind = fam.metric.kind
    return kind is Kind.COUNTER or kind is Kind.HISTOGRAM or fam.metric.name in EVENT_GAUGES


def _value(s: Series | HistogramSeries) -> list[Any]:
    if isinstance(s, HistogramSeries):
        return [list(s.counts), _sum(s.sum_ns), s.count, s.native_state()]
    return [s.value]


def metric_state(registry: Registry) -> dict[str, list[list[Any]]]:
    """Per family, one row per label set: [*label values, value] for counters and gauges,
    [*label values, [bucket counts], sum_ns, count, native state or None] for histograms."""
    out: dict[str, list[list[Any]]] = {}
    for name, fam in registry.families.items():
        if not _kept(fam):
            continue
        rows = [[*values, *_value(s)] for values, s in fam.series.items()
                if not isinstance(s, CallbackSeries)]  # callbacks: restored with the model
        if rows:
            out[name] = rows
    return out


def track(registry: Registry, stored: set[Series | HistogramSeries] | None = None,
          ) -> list[AnyFamily]:
    """Record from now on which kept series change; returns the families tracked. `stored`:
    the series the store already holds as they are (after a load); None: none of them."""
    tracked = []
    for fam in registry.families.values():
        if not _kept(fam):
            continue
        changed: list[Series | HistogramSeries] = []
        for s in fam.series.values():
            if isinstance(s, CallbackSeries):
                continue
            s.kept = stored is not None and s in stored
            if not s.kept:
                changed.append(s)
        fam.changed = changed
        tracked.append(fam)
    return tracked


def row(name: str, s: Series | HistogramSeries) -> Row:
    key = json_text(list(s.values))
    if isinstance(s, HistogramSeries):
        return name, key, None, json_text([s.counts, _sum(s.sum_ns), s.count,
                                           s.native_state()])
    return name, key, s.value, None


def take_changes(families: list[AnyFamily], limit: int | None = None,
                 ) -> tuple[list[Row], list[tuple[str, str]]]:
    """The rows of the series changed since the last call, and the keys of those removed;
    from then on they count as stored. O(changes) (and the few families). `limit`: of about
    that many changes at most (the rest stay changed: a whole save takes them in slices)."""
    rows: list[Row] = []
    gone: list[tuple[str, str]] = []
    for fam in families:
        changed = fam.changed
        if not changed:
            continue
        if limit is not None and len(rows) + len(gone) >= limit:
            break
        name, series = fam.metric.name, fam.series
        n = len(changed) if limit is None else limit - len(rows) - len(gone)
        for values in dict.fromkeys(s.values for s in changed[:n]):
            s = series.get(values)
            if s is None or isinstance(s, CallbackSeries):
                gone.append((name, json_text(list(values))))
            else:
                s.kept = True
                rows.append(row(name, s))
        del changed[:n]
    return rows, gone


def changes_left(families: list[AnyFamily]) -> int:
    """Changes `take_changes` would take now (counted with repeats)."""
    return sum(len(fam.changed) for fam in families if fam.changed)


def state_of_rows(rows: list[tuple[str, str | bytes, Any, str | bytes | None]],
                  ) -> dict[str, list[list[Any]]]:
    """Stored rows back into `metric_state`'s form."""
    out: dict[str, list[list[Any]]] = {}
    loads = orjson.loads
    for name, key, value, hist in rows:
        out.setdefault(name, []).append(
            [*loads(key), value] if hist is None else [*loads(key), *loads(hist)])
    return out


def _fits(fam: AnyFamily, rows: list[list[Any]]) -> bool:
    """Every row has the family's shape now (its labels; its buckets for a histogram)."""
    n = len(fam.metric.labels)
    if fam.metric.kind is Kind.HISTOGRAM:
        buckets = len(fam.bounds_ns) + 1
        return all(len(r) in (n + 3, n + 4) and isinstance(r[n], list) and len(r[n]) == buckets
                   for r in rows)
    return all(len(r) == n + 1 and isinstance(r[n], int | float) for r in rows)


def restore_metrics(registry: Registry, state: dict[str, list[list[Any]]],
                    restored: set[Series | HistogramSeries] | None = None) -> list[str]:
    """The inverse of `metric_state`; returns the families skipped, and adds the series it
    set to `restored`. A family no longer in the catalog, or whose labels or buckets changed
    since the checkpoint (an upgrade), starts at zero once instead: that costs one counter
    reset, where refusing the checkpoint would lose every cursor and the model's state."""
    skipped = []
    for name, rows in state.items():
        fam = registry.families.get(name)
        if fam is None or not _kept(fam):
            continue
        if not _fits(fam, rows):
            skipped.append(name)
            continue
        n = len(fam.metric.labels)
        for r in rows:
            s = fam.labels(*(str(v) for v in r[:n]))
            if isinstance(s, HistogramSeries):
                counts, sum_ns, count, *native = r[n:]
                s.restore(counts, sum_ns, count)
                if native and native[0] is not None:
                    # Native buckets go on as well; when they were off at the checkpoint and
                    # are on now, or kept in a form this version cannot read, they start empty
                    # while the classic counts continue.
                    try:
                        s.restore_native(native[0])
                    except (ValueError, KeyError, TypeError):
                        if name not in skipped:
                            skipped.append(name)
                        continue  # stored native state differs from this one: write it again
            elif isinstance(s, CallbackSeries):
                continue
            else:
                s.restore(r[n])
            if restored is not None:
                restored.add(s)
    return skipped
