"""Which seqs one source has delivered, as a few ranges: the memory behind honest duplicates.

A seq is a duplicate only when the *same* source delivers it again (the platform redelivered),
not when the exporter's other source, or its own backfill, offers it a second time. Each source
delivers nearly contiguous runs, so a sorted list of [first, last] ranges stays a handful of
pairs however long the log. The number of ranges is bounded: past the limit the two lowest are
joined (the seqs between them, long given up or applied, then count as seen).
"""

from __future__ import annotations

from bisect import bisect_right

MAX_RANGES = 256


class SeqRanges:
    __slots__ = ("firsts", "lasts", "limit")

    def __init__(self, limit: int = MAX_RANGES) -> None:
        self.firsts: list[int] = []
        self.lasts: list[int] = []
        self.limit = limit

    def add(self, seq: int) -> bool:
        """Record `seq`; True when it was already recorded."""
        firsts, lasts = self.firsts, self.lasts
        if lasts and lasts[-1] + 1 == seq:  # the usual case: the next seq of the newest run
            lasts[-1] = seq
            return False
        i = bisect_right(firsts, seq) - 1  # the range starting at or before seq
        if i >= 0 and seq <= lasts[i]:
            return True
        joins_left = i >= 0 and lasts[i] + 1 == seq
        joins_right = i + 1 < len(firsts) and firsts[i + 1] == seq + 1
        if joins_left and joins_right:
            lasts[i] = lasts[i + 1]
            del firsts[i + 1], lasts[i + 1]
        elif joins_left:
            lasts[i] = seq
        elif joins_right:
            firsts[i + 1] = seq
        else:
            firsts.insert(i + 1, seq)
            lasts.insert(i + 1, seq)
            if len(firsts) > self.limit:
                lasts[0] = lasts[1]
                del firsts[1], lasts[1]
        return False

    def __contains__(self, seq: int) -> bool:
        i = bisect_right(self.firsts, seq) - 1
        return i >= 0 and seq <= self.lasts[i]

    def snapshot(self) -> list[list[int]]:
        return [[a, b] for a, b in zip(self.firsts, self.lasts, strict=True)]

    @classmethod
    def restore(cls, ranges: list[list[int]], limit: int = MAX_RANGES) -> SeqRanges:
        r = cls(limit)
        for a, b in ranges:
            r.firsts.append(int(a))
            r.lasts.append(int(b))
        return r
