"""Counter and histogram values as plain data, so a restarted exporter continues from them.

Counters that restart at zero are only added up correctly by the one scraper that saw the old
process's last value: a second Prometheus replica, or any scrape lost with the process, misses
what came between. Restoring every counter and histogram (counts, buckets, exact sums) from the
checkpoint makes the new process's values continue the old ones, so any scraper reads the same
totals and never sees a reset. The checkpoint's own save counters are left out: saving changes
them, and they describe this process's writes.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from exporter.catalog import Kind
from exporter.sinks.metrics.family import AnyFamily, Family, Registry
from exporter.sinks.metrics.series import CallbackSeries, HistogramSeries

# Gauges whose value comes from the event log (a units.scaled event), not from this process.
EVENT_GAUGES = frozenset({"zaroz_workload_desired_units"})
NOT_RESTORED = frozenset({"zaroz_checkpoint_saves_total"})


def _kept(fam: object) -> TypeGuard[AnyFamily]:
    if not isinstance(fam, Family) or fam.metric.name in NOT_RESTORED:
        return False
    kind = fam.metric.kind
    return kind is Kind.COUNTER or kind is Kind.HISTOGRAM or fam.metric.name in EVENT_GAUGES


def metric_state(registry: Registry) -> dict[str, list[list[Any]]]:
    """Per family, one row per label set: [*label values, value] for counters and gauges,
    [*label values, [bucket counts], sum_ns, count, native state or None] for histograms."""
    out: dict[str, list[list[Any]]] = {}
    for name, fam in registry.families.items():
        if not _kept(fam):
            continue
        rows: list[list[Any]] = []
        for values, s in fam.series.items():
            if isinstance(s, CallbackSeries):
                continue  # read from the model at scrape time: restored with the model
            if isinstance(s, HistogramSeries):
                rows.append([*values, list(s.counts), s.sum_ns, s.count, s.native_state()])
            else:
                rows.append([*values, s.value])
        if rows:
            out[name] = rows
    return out


def _fits(fam: AnyFamily, rows: list[list[Any]]) -> bool:
    """Every row has the family's shape now (its labels; its buckets for a histogram)."""
    n = len(fam.metric.labels)
    if fam.metric.kind is Kind.HISTOGRAM:
        buckets = len(fam.bounds_ns) + 1
        return all(len(r) in (n + 3, n + 4) and isinstance(r[n], list) and len(r[n]) == buckets
                   for r in rows)
    return all(len(r) == n + 1 and isinstance(r[n], int | float) for r in rows)


def restore_metrics(registry: Registry, state: dict[str, list[list[Any]]]) -> list[str]:
    """The inverse of `metric_state`; returns the families skipped. A family no longer in the
    catalog, or whose labels or buckets changed since the checkpoint (an upgrade), starts at
    zero once instead: that costs one counter reset, where refusing the checkpoint would lose
    every cursor and the model's state."""
    skipped = []
    for name, rows in state.items():
        fam = registry.families.get(name)
        if fam is None or not _kept(fam):
            continue
        if not _fits(fam, rows):
            skipped.append(name)
            continue
        n = len(fam.metric.labels)
        for row in rows:
            s = fam.labels(*(str(v) for v in row[:n]))
            if isinstance(s, HistogramSeries):
                counts, sum_ns, count, *native = row[n:]
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
            elif not isinstance(s, CallbackSeries):
                s.restore(row[n])
    return skipped
