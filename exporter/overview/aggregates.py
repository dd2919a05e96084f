"""The overview's sums, kept up to date from what changed instead of read from every series.

A request used to walk every series of a dozen families and every row of the UnitSignal table
(100k rows: tens of ms each time). Here each family's series are watched (`Family.watch`: the
series rendered or removed since the last look, plus those waiting for a render) and the table's
changed chunks (`RowTable.watch`), so a request costs what changed since the last one, plus its
answer (one entry per workload). `collect.overview` is the same answer computed from scratch;
tests compare the two after random changes.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from typing import Any, cast

from exporter.model.unitsignals import Key
from exporter.sinks.metrics.family import Family, HistogramFamily, Watch
from exporter.sinks.metrics.series import HistogramSeries
from exporter.sinks.metrics.table import SHIFT, RowTable, some

Counts = tuple[int, ...]


class Sums:
    """A counter family's values summed by workload (label 0), or by workload and the label at
    `label`: what `collect._by_workload` computes. Series of this family are never callbacks."""

    def __init__(self, fam: Family[Any], label: int | None = None) -> None:
        self.fam = fam
        self.label = label
        self.watch: Watch = fam.watch()
        self.values: dict[tuple[str, ...], int] = {}
        self.sums: dict[str, Any] = {}
        self._n: dict[Hashable, int] = {}  # series under each workload (and label value)
        # Keys of a whole pass still to sum (`warm`). After a restart a family holds every
        # restored series: summing them when the server is made held the start ~0.2 s at 1,000
        # workloads, so the first look sums them, in slices where the caller can yield.
        self._left: list[tuple[str, ...]] = []
        self.watch.overflow = True

    def warming(self) -> bool:
        """A whole pass is due or under way."""
        return self.watch.overflow or bool(self._left)

    def warm(self, budget: int) -> bool:
        """Sum up to `budget` series of a whole pass (one is begun after an overflow: at the
        start, or when the watch lost track); True while some are left. A series that changes,
        comes or goes between two slices is in the watch, which `sync` applies after the pass."""
        w = self.watch
        if w.overflow:
            w.overflow = False
            self.values, self.sums, self._n = {}, {}, {}
            self._left = list(self.fam.series)
        if not self._left:
            return False
        take = self._left[-budget:]
        del self._left[-budget:]
        series, values = self.fam.series, self.values
        for key in take:
            s = series.get(key)
            if s is not None and key not in values:
                self._put(key, int(s.value))
        return bool(self._left)

    def _put(self, key: tuple[str, ...], v: int) -> None:
        wl, n = key[0], self._n
        n[wl] = n.get(wl, 0) + 1
        self.values[key] = v
        if self.label is None:
            self.sums[wl] = self.sums.get(wl, 0) + v
            return
        sub = (wl, key[self.label])
        n[sub] = n.get(sub, 0) + 1
        per = self.sums.setdefault(wl, {})
        per[sub[1]] = per.get(sub[1], 0) + v

    def _drop(self, key: tuple[str, ...]) -> None:
        v = self.values.pop(key)
        wl, n = key[0], self._n
        if self.label is None:
            self.sums[wl] -= v
        else:
            sub = (wl, key[self.label])
            per = self.sums[wl]
            per[sub[1]] -= v
            n[sub] -= 1
            if not n[sub]:
                del n[sub], per[sub[1]]
        n[wl] -= 1
        if not n[wl]:
            del n[wl], self.sums[wl]

    def sync(self) -> dict[str, Any]:
        """The sums as of now (do not change the result)."""
        while self.warm(1 << 30):  # a pass not done in slices ends here, at once
            pass
        w = self.watch
        series, values = self.fam.series, self.values
        for s in itertools.chain(w.series, self.fam.dirty):
            key = s.values
            cur = series.get(key)
            if key in values:
                if cur is not None and int(cur.value) == values[key]:
                    continue
                self._drop(key)
            if cur is not None:
                self._put(key, int(cur.value))
        w.series.clear()
        return self.sums


class HistogramSums:
    """A histogram family's bucket counts (not cumulative) summed by workload: what
    `history.take` computes for one measurement. An unchanged workload keeps its tuple."""

    def __init__(self, fam: HistogramFamily) -> None:
        self.fam = fam
        self.watch: Watch = fam.watch()
        self.members: dict[str, set[tuple[str, ...]]] = {}
        self.counts: dict[str, Counts] = {}
        self._full()

    def _full(self) -> None:
        self.members, self.counts = {}, {}
        for key in self.fam.series:
            self.members.setdefault(key[0], set()).add(key)
        for wl in self.members:
            self._sum(wl)

    def _sum(self, wl: str) -> None:
        keys = self.members.get(wl)
        if not keys:
            self.members.pop(wl, None)
            self.counts.pop(wl, None)
            return
        series = self.fam.series
        total: Counts | None = None
        for key in keys:
            c = series[key].counts
            total = tuple(c) if total is None else tuple(
                a + b for a, b in zip(total, c, strict=True))
        assert total is not None
        if self.counts.get(wl) != total:
            self.counts[wl] = total

    def sync(self) -> set[str]:
        """Bring the sums up to date; returns the workloads whose counts changed."""
        w = self.watch
        if w.overflow:
            w.overflow = False
            before = self.counts
            self._full()
            return {wl for wl in before.keys() | self.counts.keys()
                    if before.get(wl) is not self.counts.get(wl)}
        touched: set[str] = set()
        series = self.fam.series
        for s in itertools.chain(w.series, self.fam.dirty):
            assert isinstance(s, HistogramSeries)
            key = s.values
            keys = self.members.setdefault(key[0], set())
            if key in series:
                keys.add(key)
            else:
                keys.discard(key)
            touched.add(key[0])
        w.series.clear()
        changed = set()
        for wl in touched:
            old = self.counts.get(wl)
            self._sum(wl)
            if self.counts.get(wl) is not old:
                changed.add(wl)
        return changed


class SignalIndex:
    """The UnitSignals behind on a generation (generation_lag > 0), from the table's chunks
    changed since the last look: what `collect._signals` finds by reading every row."""

    def __init__(self, table: RowTable) -> None:
        self.table = table
        self.changed: set[int] = table.watch()  # every chunk there is, at first
        self.lagging: dict[Key, Any] = {}  # key -> its state
        self.invalid: set[Key] = set()
        self._by_chunk: dict[int, list[Key]] = {}
        # The chunk each lagging key was last found in: a key deleted and made again can take a
        # slot in another chunk (the table reuses free slots), read before its old chunk.
        self._chunk_of: dict[Key, int] = {}

    def sync(self, budget: int | None = None) -> int:
        """Read up to `budget` changed chunks (all without one); returns how many are left."""
        changed, table = self.changed, self.table
        todo = changed if budget is None else some(changed, budget)
        keys, states, lagging, invalid = table.keys, table.states, self.lagging, self.invalid
        chunk_of = self._chunk_of
        for c in todo:
            for key in self._by_chunk.pop(c, ()):
                if chunk_of.get(key) == c:  # else found in another chunk since
                    del lagging[key], chunk_of[key]
                    invalid.discard(key)
            found = []
            for slot in range((c << SHIFT), min(len(keys), (c + 1) << SHIFT)):
                k = keys[slot]
                if k is None:
                    continue
                s = states[slot]
                if s.generation_lag > 0:
                    key = cast(Key, k)  # the only table with this column: UnitSignalMetrics
                    lagging[key] = s
                    chunk_of[key] = c
                    found.append(key)
                    if s.stuck_invalid_spec:
                        invalid.add(key)
                    else:
                        invalid.discard(key)
            if found:
                self._by_chunk[c] = found
        if todo is changed:
            changed.clear()
        return len(changed)
