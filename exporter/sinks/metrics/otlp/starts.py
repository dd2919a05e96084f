"""Start times of the cumulative series, kept in the checkpoint so a restarted exporter sends
each sum and histogram with the start time it had: the receiver sees one series going on, not
a reset. The OpenTelemetry SDKs start every cumulative series again at each restart.

A series' start time is set when the checkpoint first stores it: the time of the save before
(it was made since), so it is never later than anything it counts. A series removed loses its
start time; made again, it gets a new one, as the data model asks of a series that restarts.
A state really lost (an empty disk) starts every series with a new start time.

Rows are taken in proportion to change: a new series is one row, a removed one a deleted key.
A stored start time whose series was not restored (its family's labels changed, the family
left the catalog or the selection) is removed at the next save, so rows never outlive their
series.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

Key = tuple[str, str]  # family name, label values as a JSON list (the series rows' key)


class StartTimes:
    def __init__(self, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.clock_ns = clock_ns
        self.process_start = clock_ns()
        self.known: dict[Key, int] = {}
        self._new: dict[Key, int] = {}
        self._gone: set[Key] = set()
        self._since = self.process_start  # the last take: series new since were made after it
        self.epoch = self.process_start  # the oldest start time held (`of`'s fallback)

    def restore(self, rows: Iterable[Sequence[Any]], live: Collection[Key] | None = None) -> int:
        """The stored rows, (family, key, start ns), after a load; returns how many are kept.
        `live`: the keys of the series restored; a row of any other goes at the next take."""
        for name, key, ns in rows:
            if live is not None and (name, key) not in live:
                self._gone.add((name, key))
                continue
            self.known[name, key] = int(ns)
        if self.known:
            self.epoch = min(self.known.values())
        return len(self.known)

    def seen(self, rows: Iterable[Sequence[Any]], gone: Iterable[Sequence[Any]]) -> None:
        """The series rows a checkpoint takes (family and key first) and the keys it removes."""
        known, new, since = self.known, self._new, self._since
        for r in gone:
            k = (r[0], r[1])
            if known.pop(k, None) is not None:
                new.pop(k, None)
                self._gone.add(k)
        for r in rows:
            k = (r[0], r[1])
            if k not in known:
                known[k] = new[k] = since
                self._gone.discard(k)

    def take(self, full: bool) -> tuple[list[tuple[str, str, int]], list[Key]]:
        """The rows to write and the keys to remove since the last take (`full`: every row, the
        store being replaced)."""
        items = self.known if full else self._new
        rows = [(n, k, ns) for (n, k), ns in items.items()]
        gone = [] if full else list(self._gone)
        self._new = {}
        self._gone = set()
        self._since = self.clock_ns()
        return rows, gone

    def snapshot(self) -> dict[Key, int]:
        """A copy to read off the event loop (an export maps its series in a thread)."""
        return dict(self.known)
