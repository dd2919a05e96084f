"""Which shard exports which workload.

A workload's events are one ordered log, so a workload is never split: each goes whole to one
shard, chosen by a stable hash of its id. Jump consistent hashing (Lamping and Veach, 2014) moves
only about 1/N of the workloads when the shard count grows from N-1 to N; it is eight lines, so
it is written here rather than pulled in as a dependency.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

_ORDINAL = re.compile(r"-(\d+)$")


def jump_hash(key: int, buckets: int) -> int:
    if buckets < 1:
        raise ValueError("buckets must be at least 1")
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * 2862933555777941757 + 1) & 0xFFFFFFFFFFFFFFFF
        j = int((b + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return b


@functools.lru_cache(maxsize=1 << 16)
def shard_of(workload: str, total: int) -> int:
    """Cached: asked for every object a watch delivers (a sha256 is ~1 µs; workloads are few)."""
    key = int.from_bytes(hashlib.sha256(workload.encode()).digest()[:8], "big")
    return jump_hash(key, total)


def ordinal_from_pod_name(name: str | None) -> int | None:
    """A StatefulSet pod is named `<statefulset>-<ordinal>`."""
    m = _ORDINAL.search(name or "")
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class Shard:
    index: int = 0
    total: int = 1

    def __post_init__(self) -> None:
        if self.total < 1 or not 0 <= self.index < self.total:
            raise ValueError(f"shard {self.index} of {self.total} is not a valid shard")

    def owns(self, workload: str) -> bool:
        return self.total == 1 or shard_of(workload, self.total) == self.index
