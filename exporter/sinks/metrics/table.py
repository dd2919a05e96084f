"""Per-object families: one bare pre-rendered line per Kubernetes object.

At 100k UnitSignals and a dozen per-object metrics a Series object per sample would cost more
memory than the objects themselves; a family here holds only `key -> bytes` (the key tuple is
shared by every family of the object) and joins the lines at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from exporter.catalog import Metric
from exporter.sinks.metrics.series import format_value


class TableFamily:
    __slots__ = ("_body", "lines", "live", "metric", "prefix")

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self.prefix = metric.name
        self.lines: dict[Hashable, bytes] = {}
        self.live: dict[Hashable, tuple[str, Callable[[], float]]] = {}
        self._body: bytes | None = b""

    def set(self, key: Hashable, block: str, value: float) -> None:
        """`block` is the rendered label set, `{a="x",b="y"}`."""
        if self.live:
            self.live.pop(key, None)
        v = str(value) if type(value) is int else format_value(value)
        self.lines[key] = f"{self.prefix}{block} {v}\n".encode()
        self._body = None

    def set_live(self, key: Hashable, block: str, fn: Callable[[], float]) -> None:
        """A value read at each scrape (e.g. an age)."""
        self.live[key] = (block, fn)
        self.lines[key] = b""
        self._body = None

    def remove(self, key: Hashable) -> None:
        self.live.pop(key, None)
        if self.lines.pop(key, None) is not None:
            self._body = None

    def __len__(self) -> int:
        return len(self.lines)

    def body(self) -> bytes:
        if self.live:
            p = self.prefix
            lines = self.lines
            for key, (block, fn) in self.live.items():
                lines[key] = f"{p}{block} {format_value(fn())}\n".encode()
            self._body = None
        if self._body is None:
            self._body = b"".join(self.lines.values())
        return self._body
