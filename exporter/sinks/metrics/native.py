"""Native (sparse, exponential) histogram buckets, as Prometheus defines them.

At schema `s` the bucket boundaries are the powers of `2^(2^-s)`; bucket `i` holds the values in
`(base^(i-1), base^i]` (so 1 is always a boundary), and values at or below the zero threshold
fall in the zero bucket. Only buckets that were hit are kept, as a dict of index to count.

Limit (`max_buckets`, 0: none): when a new bucket would take a series over it, the series'
resolution is halved (schema - 1: each pair of neighbours merged into one, exactly as
client_golang's `doubleBucketWidth`) until it fits or the schema reaches -4. Counts are never
reset: a reset would look like a counter reset to `rate()`. The lower schema stays until the
process restarts; Prometheus merges histograms of different schemas to the lower one, so
`rate()` across the change is correct.

The state is plain data (`state()`/`restore()`: ints only), for the restart checkpoint.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

MIN_SCHEMA, MAX_SCHEMA = -4, 8
# client_golang's default zero threshold: only exact zeros fall in the zero bucket. Also what
# marks the histogram as native for Prometheus 2.4x even before its first observation.
ZERO_THRESHOLD = 2.0**-128
# Per positive schema: the 2^s boundaries within [0.5, 1), for math.frexp's mantissa.
_BOUNDS = {s: [2.0 ** (j / (1 << s) - 1) for j in range(1 << s)] for s in range(1, MAX_SCHEMA + 1)}


@dataclass(frozen=True)
class NativeConfig:
    """`--native-histogram-schema` and `--native-histogram-max-buckets`."""

    schema: int = 3
    max_buckets: int = 160

    def __post_init__(self) -> None:
        if not MIN_SCHEMA <= self.schema <= MAX_SCHEMA:
            raise ValueError(f"schema must be in {MIN_SCHEMA}..{MAX_SCHEMA}, not {self.schema}")
        if self.max_buckets < 0:
            raise ValueError(f"max buckets must be >= 0, not {self.max_buckets}")

    @staticmethod
    def from_flags(schema: int | None, max_buckets: int) -> NativeConfig | None:
        """The flags' values as a config; no schema (`off`): None, classic buckets only."""
        return None if schema is None else NativeConfig(schema, max_buckets)


DEFAULT_NATIVE = NativeConfig()


def bucket_index(v: float, schema: int) -> int:
    """The index of the bucket holding `v` (> 0) at `schema`: base^(i-1) < v <= base^i."""
    frac, exp = math.frexp(v)
    if schema > 0:
        bounds = _BOUNDS[schema]
        return bisect_left(bounds, frac) + (exp - 1) * len(bounds)
    key = exp - 1 if frac == 0.5 else exp
    return (key + (1 << -schema) - 1) >> -schema


class NativeBuckets:
    """The native half of one histogram series: schema, zero bucket and the buckets hit."""

    __slots__ = ("buckets", "max_buckets", "schema", "zero_count")

    def __init__(self, config: NativeConfig) -> None:
        self.schema = config.schema
        self.max_buckets = config.max_buckets
        self.zero_count = 0
        self.buckets: dict[int, int] = {}

    def observe_ns(self, ns: int) -> None:
        v = ns / 1e9
        if v <= ZERO_THRESHOLD:
            self.zero_count += 1
            return
        i = bucket_index(v, self.schema)
        b = self.buckets
        if i in b:
            b[i] += 1
            return
        b[i] = 1
        if self.max_buckets and len(b) > self.max_buckets:
            self.reduce()

    def reduce(self) -> None:
        """Halve the resolution until the buckets fit the limit (or the schema is -4)."""
        while len(self.buckets) > self.max_buckets and self.schema > MIN_SCHEMA:
            self._halve()

    def spans(self) -> tuple[list[tuple[int, int]], list[int]]:
        """The buckets as Prometheus sends them: spans (offset from the previous span's end,
        length) and each bucket's count as a delta from the previous bucket's."""
        spans: list[tuple[int, int]] = []
        deltas: list[int] = []
        prev_i, prev_c = 0, 0
        for i in sorted(self.buckets):
            c = self.buckets[i]
            if spans and i == prev_i + 1:
                off, n = spans[-1]
                spans[-1] = (off, n + 1)
            else:
                spans.append((i - prev_i - 1 if spans else i, 1))
            deltas.append(c - prev_c)
            prev_i, prev_c = i, c
        return spans, deltas

    # -- plain data, for the checkpoint -------------------------------------------------------

    def state(self) -> dict[str, int | list[int]]:
        """Schema, zero count and the buckets hit (indexes and counts, ascending): ints only."""
        idx = sorted(self.buckets)
        return {"schema": self.schema, "zero_count": self.zero_count, "index": idx,
                "count": [self.buckets[i] for i in idx]}

    def restore(self, state: dict[str, int | list[int]]) -> None:
        """Back to a `state()`. A checkpoint at a finer schema than the configured one is reduced
        to it (counts kept); at a coarser one it stays coarse (buckets cannot be split)."""
        schema, zero = state["schema"], state["zero_count"]
        index, count = state["index"], state["count"]
        if not (isinstance(schema, int) and isinstance(zero, int) and isinstance(index, list)
                and isinstance(count, list) and len(index) == len(count)
                and MIN_SCHEMA <= schema <= MAX_SCHEMA):
            raise ValueError("not a native histogram state")
        self.zero_count = zero
        self.buckets = {int(i): int(c) for i, c in zip(index, count, strict=True)}
        configured, self.schema = self.schema, schema
        while self.schema > configured:
            self._halve()
        if self.max_buckets and len(self.buckets) > self.max_buckets:
            self.reduce()

    def _halve(self) -> None:
        merged: dict[int, int] = {}
        for i, c in self.buckets.items():
            j = (i + 1) >> 1  # buckets 2j-1 and 2j become bucket j
            merged[j] = merged.get(j, 0) + c
        self.buckets = merged
        self.schema -= 1
