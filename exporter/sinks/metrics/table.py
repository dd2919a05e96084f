"""Per-object families, rendered in chunks of rows.

At 100k UnitSignals and a dozen per-object metrics, a bytes line per sample plus a joined body
per family held the exposition twice over (~4.5 KB per object). Here each object is one row (its
label block and the model's state snapshot, which the model keeps anyway) in a numbered slot;
slots are grouped in chunks of `CHUNK`. A change only marks its chunk dirty; the next scrape
renders each dirty chunk once, every family at once, so many writes to an object between two
scrapes cost one render, a watch event costs a set insertion, and memory holds the exposition
once, as the chunks' bytes. Families are joined from the chunks at scrape time and not kept. A
chunk that fills with new rows (a sync) is rendered at once, so the first scrape after a sync
has little left to do.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.catalog import Kind, Metric

# (kind, a chunk's text, its previous text, that text's transcoding, its rows' line starts, their
# labels encoded) -> one field per line (protobuf.transcode_lines)
Transcode = Callable[
    [Kind, bytes, bytes, Sequence[bytes], Sequence[str], Callable[[], Sequence[bytes]]],
    list[bytes]]

SHIFT = 4
CHUNK = 1 << SHIFT  # rows per chunk: small, so a 1% change re-renders few unchanged rows

# (the label block left open, `{a="x",b="y"`, for a column to add its own labels and close;
# the state the columns read)
Row = tuple[str, Any]


@dataclass(frozen=True)
class Column:
    """How one family renders the rows of a chunk. `live`: rows whose value is read at each
    scrape (an age); chunks holding one are rendered again for this column on every scrape."""

    family: TableFamily
    render: Callable[[Sequence[Row]], str]
    live: Callable[[Row], bool] | None = None
    count: Callable[[Sequence[Row]], int] = len  # series a chunk's rows give (len: one each)


class TableFamily:
    """One per-object family of the registry: a view on its column of a RowTable."""

    __slots__ = ("index", "metric", "pb_parts", "prefix", "table")

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self.prefix = metric.name
        self.table: RowTable | None = None
        self.index = 0
        # chunk -> (the text part it was transcoded from, its protobuf Metric fields by line)
        self.pb_parts: list[tuple[bytes, list[bytes]]] = []

    def __len__(self) -> int:
        return 0 if self.table is None else self.table.count(self.index)

    def body(self) -> bytes:
        return b"" if self.table is None else self.table.body(self.index)

    def pieces(self) -> list[bytes]:
        """The body as its chunks' bytes, not joined (see RowTable.pieces)."""
        return [] if self.table is None else self.table.pieces(self.index)

    def pb_body(self, transcode: Transcode) -> bytes:
        """The protobuf form: each chunk's text transcoded line by line, again only where it
        changed; each row's own labels are encoded once (`RowTable.pb_labels`)."""
        table = self.table
        if table is None:
            return b""
        parts, cache, kind = table.parts_of(self.index), self.pb_parts, self.metric.kind
        if len(cache) > len(parts):
            del cache[len(parts):]
        for c, text in enumerate(parts):
            if c < len(cache) and cache[c][0] is text:
                continue
            old_text, old = cache[c] if c < len(cache) else (b"", [])
            blocks = [b for b, _ in table._chunk(c)]
            heads = [self.prefix + b for b in blocks]
            pb = transcode(kind, text, old_text, old, heads,
                           lambda blocks=blocks: [table.pb_labels(b) for b in blocks])
            if c < len(cache):
                cache[c] = (text, pb)
            else:
                cache.append((text, pb))
        return b"".join(itertools.chain.from_iterable([pb for _, pb in cache]))


class RowTable:
    """The rows of one kind of object, shared by the families it renders."""

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns = list(columns)
        for i, col in enumerate(self.columns):
            col.family.table, col.family.index = self, i
        self.slots: dict[Hashable, int] = {}
        # slot -> label block and state (None: a free slot); two lists, no tuple per row
        self.blocks: list[str | None] = []
        self.states: list[Any] = []
        self.free: list[int] = []
        self.dirty: set[int] = set()
        self.live: set[int] = set()  # chunks with a row some live column reads at scrape time
        # column -> chunk -> rendered bytes, and the number of series in it
        self.parts: list[list[bytes]] = [[] for _ in self.columns]
        # label block -> its labels as protobuf LabelPair fields, once per row for every
        # column's protobuf form (kept to about the rows there are)
        self._pb_labels: dict[str, bytes] = {}
        self.sizes: list[list[int]] = [[] for _ in self.columns]
        self.totals = [0] * len(self.columns)

    def __len__(self) -> int:
        return len(self.slots)

    def put(self, key: Hashable, block: str, state: Any) -> None:
        slot = self.slots.get(key)
        if slot is None:
            if self.free:
                slot = self.free.pop()
            else:
                slot = len(self.blocks)
                self.blocks.append(block)
                self.states.append(state)
                self.slots[key] = slot
                if slot & (CHUNK - 1) == CHUNK - 1:
                    # A chunk just filled with new rows (a sync): render it now, page by page,
                    # rather than all at the first scrape.
                    self.dirty.add(slot >> SHIFT)
                    self._render({slot >> SHIFT})
                    return
            self.slots[key] = slot
        self.blocks[slot] = block
        self.states[slot] = state
        self.dirty.add(slot >> SHIFT)

    def update(self, key: Hashable, state: Any) -> None:
        """A new state for a row already there, under the same label block."""
        slot = self.slots[key]
        self.states[slot] = state
        self.dirty.add(slot >> SHIFT)

    def remove(self, key: Hashable) -> None:
        slot = self.slots.pop(key, None)
        if slot is not None:
            self.blocks[slot] = self.states[slot] = None
            self.free.append(slot)
            self.dirty.add(slot >> SHIFT)

    def pb_labels(self, block: str) -> bytes:
        enc = self._pb_labels.get(block)
        if enc is None:
            from exporter.sinks.metrics.protobuf import encode_labels

            if len(self._pb_labels) > 2 * len(self.slots) + CHUNK:
                self._pb_labels.clear()  # rows gone since: start again
            enc = self._pb_labels[block] = encode_labels(block[1:])
        return enc

    def count(self, index: int) -> int:
        self.refresh()
        return self.totals[index]

    def body(self, index: int) -> bytes:
        return b"".join(self.pieces(index))

    def pieces(self, index: int) -> list[bytes]:
        """One column's chunks as they are now: references to immutable bytes, so the list is
        a consistent snapshot that costs no copy of the exposition (a scrape holds ~8 bytes a
        chunk instead of a joined family body; the server joins small groups as it writes)."""
        return [p for p in self.parts_of(index) if p]

    def parts_of(self, index: int) -> list[bytes]:
        """A column's rendered chunks by chunk number, up to date (live ones rendered again)."""
        self.refresh()
        col, parts = self.columns[index], self.parts[index]
        if col.live is not None:
            for c in self.live:
                parts[c] = col.render(self._chunk(c)).encode()
        return parts

    def refresh(self) -> None:
        """Render every dirty chunk, all columns."""
        if self.dirty:
            self._render(self.dirty)

    def _render(self, chunks: set[int]) -> None:
        n_chunks = (len(self.blocks) + CHUNK - 1) >> SHIFT
        for parts, sizes in zip(self.parts, self.sizes, strict=True):
            if len(parts) < n_chunks:
                parts.extend([b""] * (n_chunks - len(parts)))
                sizes.extend([0] * (n_chunks - len(sizes)))
        lives = [col.live for col in self.columns if col.live is not None]
        for c in chunks:
            rows = self._chunk(c)
            for i, col in enumerate(self.columns):
                n = col.count(rows)
                self.totals[i] += n - self.sizes[i][c]
                self.sizes[i][c] = n
                self.parts[i][c] = col.render(rows).encode()
            if any(live(r) for live in lives for r in rows):
                self.live.add(c)
            else:
                self.live.discard(c)
        self.dirty -= chunks

    def _chunk(self, c: int) -> list[Row]:
        lo, hi = c << SHIFT, (c + 1) << SHIFT
        return [r for r in zip(self.blocks[lo:hi], self.states[lo:hi], strict=True)
                if r[0] is not None]
