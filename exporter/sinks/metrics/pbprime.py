"""A scrape's rendering, done ahead in bounded slices that yield to the loop.

A scrape's render must be synchronous (no await between the checkpoint and the exposition, so
the exposition is exactly the state a checkpoint saved: wiring/state/checkpoint.py), so whatever it
renders holds the event loop: the text lines of every series and table chunk changed since the
last scrape (100k UnitSignal rows after a sync or a burst of watch events: hundreds of ms),
and for the first protobuf scrape every series and chunk encoded (seconds at a million series).
`prime` does that work before the render, a slice at a time with an `await` between slices;
the render then has left only what changed during the priming, and joining cached bytes.

Text first, for every format (a protobuf body is built from the same change lists); then, for
a text scrape, the per-object tables' dirty chunks; for a protobuf scrape, the encoding not done
yet (until a protobuf scrape asks, nothing is encoded: text-only installations pay nothing, and
protobuf-only ones render no table text).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from exporter.sinks.metrics.family import Family, Registry
from exporter.sinks.metrics.table import SHIFT

# One slice's work: ~10-40 ms on one core (bench/protobuf.py prints the longest slice).
SLICE_SERIES = 5_000
SLICE_CHUNKS = 100  # table chunks, all columns (CHUNK rows each)


def prime_steps(registry: Registry, series: int | None = None, chunks: int | None = None,
                *, protobuf: bool = True, text: bool = True) -> Iterator[None]:
    """Render what the next render would (text lines changed; with `text`, the tables' dirty
    chunks; with `protobuf`, what is not encoded yet), yielding after each slice of `series`
    series or `chunks` table chunks (default: SLICE_SERIES, SLICE_CHUNKS)."""
    series = series or SLICE_SERIES
    chunks = chunks or SLICE_CHUNKS
    # Each family's slices are capped by what it had to do at the start: with changes arriving
    # between slices faster than a slice renders, priming would otherwise never end (the render
    # does whatever is left).

    def sliced(step: Callable[[int], int], budget: int, todo: int) -> Iterator[None]:
        cap = todo // budget + 2
        while step(budget) and cap:
            cap -= 1
            yield

    for fam in registry.visible():
        if isinstance(fam, Family):
            yield from sliced(fam.prime, series, len(fam.dirty))
            if protobuf:
                yield from sliced(fam.pb_prime, series, len(fam.dirty) + len(fam.series))
        elif fam.table is not None and fam.index == 0:  # a table's chunks: once for all columns
            table = fam.table
            if text:
                yield from sliced(table.prime, chunks, len(table.dirty))
            if protobuf:
                yield from sliced(table.pb_prime, chunks, len(table.keys) >> SHIFT)
    # the last slice of each family ends without a yield: the caller's render follows


async def prime(registry: Registry, *, protobuf: bool = True, text: bool = True) -> int:
    """`prime_steps` with the loop run between slices; returns the number of yields."""
    n = 0
    for _ in prime_steps(registry, protobuf=protobuf, text=text):
        n += 1
        await asyncio.sleep(0)
    return n
