"""The first protobuf scrape's encoding, done ahead in bounded slices that yield to the loop.

Until a protobuf scrape asks, nothing is encoded as protobuf (text-only installations pay
nothing). The first one then has every series and every table chunk to encode: seconds at a
million series, during which a synchronous render would hold the event loop (no /healthz, no
watch events, no other scrape). `prime` does that work before the scrape's render, a slice at a
time with an `await` between slices; the render itself (synchronous, so the exposition is
exactly the state a checkpoint saved) then encodes only what changed during the priming. Later
scrapes find nothing to prime but the table chunks changed since, which are done ahead the same
way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from exporter.sinks.metrics.family import Family, Registry
from exporter.sinks.metrics.table import SHIFT

# One slice's work: ~10-40 ms on one core (bench/protobuf.py prints the longest slice).
SLICE_SERIES = 5_000
SLICE_CHUNKS = 100  # table chunks, all columns (CHUNK rows each)


def prime_steps(registry: Registry, series: int | None = None,
                chunks: int | None = None) -> Iterator[None]:
    """Encode what the next protobuf render would, yielding after each slice of `series`
    series or `chunks` table chunks (default: SLICE_SERIES, SLICE_CHUNKS)."""
    series = series or SLICE_SERIES
    chunks = chunks or SLICE_CHUNKS
    # Each family's slices are capped by what it had to do at the start: with changes arriving
    # between slices faster than a slice encodes, priming would otherwise never end (the render
    # encodes whatever is left).
    for fam in registry.visible():
        if isinstance(fam, Family):
            cap = (len(fam.dirty) + len(fam.series)) // series + 2
            while fam.pb_prime(series) and cap:
                cap -= 1
                yield
        elif fam.table is not None and fam.index == 0:  # a table's chunks: once for all columns
            table = fam.table
            cap = (len(table.keys) >> SHIFT) // chunks + 2
            while table.pb_prime(chunks) and cap:
                cap -= 1
                yield
    # the last slice of each family ends without a yield: the caller's render follows


async def prime(registry: Registry) -> int:
    """`prime_steps` with the loop run between slices; returns the number of yields."""
    n = 0
    for _ in prime_steps(registry):
        n += 1
        await asyncio.sleep(0)
    return n
