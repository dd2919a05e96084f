"""Per-object families, rendered in chunks of rows.

At 100k UnitSignals and a dozen per-object metrics, a bytes line per sample plus a joined body
per family held the exposition twice over (~4.5 KB per object). Here each object is one row (its
key and the model's state snapshot, which the model keeps anyway) in a numbered slot; slots are
grouped in chunks of `CHUNK`. A row's label block is made from its key and state each time its
chunk is rendered, not kept (~150 B an object: 15 MB at 100k objects, for ~0.3 µs a row
rendered). A change only marks its chunk dirty; the next scrape renders each dirty chunk once,
every family at once, so many writes to an object between two scrapes cost one render, a watch
event costs a set insertion, and memory holds the exposition once, as the chunks' bytes.
Families are joined from the chunks at scrape time and not kept. A chunk that fills with new
rows (a sync) is rendered at once, so the first scrape after a sync has little left to do.

The protobuf form is rendered the same way but apart, once a protobuf scrape asked for it: each
column's `pb` renderer writes a chunk's rows straight as encoded `Metric` fields (no text in
between), kept per chunk and re-rendered only for chunks changed since the last protobuf scrape.
Text and protobuf scrapes each render only what changed since their own last scrape. The first
protobuf scrape's full render can be done ahead in bounded slices (`pb_prime`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.catalog import Metric
from exporter.sinks.metrics.protobuf import encode_labels

SHIFT = 4
CHUNK = 1 << SHIFT  # rows per chunk: small, so a 1% change re-renders few unchanged rows

# A row as a column renders it: (its label block, made at render and left open, `{a="x",b="y"`,
# for the column to add its own labels and close; the state the columns read)
Row = tuple[str, Any]


def some(todo: set[int], budget: int) -> set[int]:
    """All of `todo`, or `budget` of them taken out of it (a slice of chunks to render)."""
    return todo if len(todo) <= budget else {todo.pop() for _ in range(budget)}


@dataclass(frozen=True)
class Column:
    """How one family renders the rows of a chunk. `live`: rows whose value is read at each
    scrape (an age); chunks holding one are rendered again for this column on every scrape.
    `pb`: the chunk's rows as protobuf `MetricFamily.metric` fields, given the rows and each
    row's own labels encoded (every exported column has one; None: text only, for tests)."""

    family: TableFamily
    render: Callable[[Sequence[Row]], str]
    live: Callable[[Row], bool] | None = None
    count: Callable[[Sequence[Row]], int] = len  # series a chunk's rows give (len: one each)
    pb: Callable[[Sequence[Row], Sequence[bytes]], bytes] | None = None


class TableFamily:
    """One per-object family of the registry: a view on its column of a RowTable."""

    __slots__ = ("index", "metric", "prefix", "table")

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self.prefix = metric.name
        self.table: RowTable | None = None
        self.index = 0

    def __len__(self) -> int:
        return 0 if self.table is None else self.table.count(self.index)

    def body(self) -> bytes:
        return b"" if self.table is None else self.table.body(self.index)

    def pieces(self) -> list[bytes]:
        """The body as its chunks' bytes, not joined (see RowTable.pieces)."""
        return [] if self.table is None else self.table.pieces(self.index)

    def pb_pieces(self) -> list[bytes]:
        """The protobuf form (`Metric` fields) as its chunks' bytes, not joined."""
        return [] if self.table is None else self.table.pb_pieces(self.index)

    def pb_body(self) -> bytes:
        return b"".join(self.pb_pieces())


class RowTable:
    """The rows of one kind of object, shared by the families it renders."""

    def __init__(self, columns: Sequence[Column],
                 blocks_of: Callable[[Sequence[Any], Sequence[Any]], list[str]],
                 pb_labels_of: Callable[[Sequence[Any], Sequence[Any]], list[bytes]] | None = None,
                 ) -> None:
        """`blocks_of(keys, states)`: the label blocks of a chunk's rows, made again at each
        render of the chunk (a key is never None: None marks a free slot); `pb_labels_of`: the
        same labels as protobuf LabelPair fields (None: each text block transcoded)."""
        self.columns = list(columns)
        self.blocks_of = blocks_of
        self.pb_labels_of = pb_labels_of
        for i, col in enumerate(self.columns):
            col.family.table, col.family.index = self, i
        self.slots: dict[Hashable, int] = {}
        # slot -> key and state (None: a free slot); two lists, no tuple per row
        self.keys: list[Hashable | None] = []
        self.states: list[Any] = []
        self.free: list[int] = []
        self.dirty: set[int] = set()  # chunks whose text is out of date
        self.stale: set[int] = set()  # chunks whose counts and liveness are out of date
        self.live: set[int] = set()  # chunks with a row some live column reads at scrape time
        # column -> chunk -> protobuf Metric fields, once a protobuf scrape asked (None: not
        # yet, and no protobuf work is done), and the chunks changed since its last render
        self.pb_parts: list[list[bytes]] | None = None
        self.pb_dirty: set[int] = set()
        # column -> chunk -> rendered bytes, and the number of series in it
        self.parts: list[list[bytes]] = [[] for _ in self.columns]
        self.sizes: list[list[int]] = [[] for _ in self.columns]
        self.totals = [0] * len(self.columns)
        self.watches: list[set[int]] = []  # per reader, the chunks changed since it looked

    def watch(self) -> set[int]:
        """A set that every chunk changed from now on joins (it holds every chunk at first);
        the reader empties it as it reads them (the overview: overview/aggregates.py)."""
        w = set(range((len(self.keys) + CHUNK - 1) >> SHIFT))
        self.watches.append(w)
        return w

    def __len__(self) -> int:
        return len(self.slots)

    def put(self, key: Hashable, state: Any) -> None:
        """A row's state, new or replacing one whose label block may differ."""
        slot = self.slots.get(key)
        if slot is None:
            if self.free:
                slot = self.free.pop()
            else:
                slot = len(self.keys)
                self.keys.append(key)
                self.states.append(state)
                self.slots[key] = slot
                if slot & (CHUNK - 1) == CHUNK - 1:
                    # A chunk just filled with new rows (a sync): render it now, page by page,
                    # rather than all at the first scrape.
                    filled = {slot >> SHIFT}
                    for w in self.watches:
                        w |= filled
                    self.stale |= filled
                    self._render(filled)
                    if self.pb_parts is not None:
                        self._pb_render(filled)
                    return
            self.slots[key] = slot
        self.keys[slot] = key
        self.states[slot] = state
        c = slot >> SHIFT
        self.dirty.add(c)
        self.stale.add(c)
        if self.pb_parts is not None:
            self.pb_dirty.add(c)
        for w in self.watches:
            w.add(c)

    def update(self, key: Hashable, state: Any) -> None:
        """A new state for a row already there, under the same label block."""
        slot = self.slots[key]
        self.states[slot] = state
        c = slot >> SHIFT
        self.dirty.add(c)
        self.stale.add(c)
        if self.pb_parts is not None:
            self.pb_dirty.add(c)
        for w in self.watches:
            w.add(c)

    def remove(self, key: Hashable) -> None:
        slot = self.slots.pop(key, None)
        if slot is not None:
            self.keys[slot] = self.states[slot] = None
            self.free.append(slot)
            c = slot >> SHIFT
            self.dirty.add(c)
            self.stale.add(c)
            if self.pb_parts is not None:
                self.pb_dirty.add(c)
            for w in self.watches:
                w.add(c)

    def count(self, index: int) -> int:
        self._counts()
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

    def prime(self, budget: int) -> int:
        """Render up to `budget` dirty chunks (all columns) ahead of a scrape; returns how many
        are left (called in slices, it keeps the loop free while 100k rows render)."""
        self._render(some(self.dirty, budget))
        return len(self.dirty)

    def refresh(self) -> None:
        """Render every dirty chunk, all columns."""
        if self.dirty:
            self._render(self.dirty)

    def _grow(self, lists: Sequence[list[Any]], fill: Any) -> None:
        n_chunks = (len(self.keys) + CHUNK - 1) >> SHIFT
        for x in lists:
            if len(x) < n_chunks:
                x.extend([fill] * (n_chunks - len(x)))

    def _count(self, c: int, rows: Sequence[Row]) -> None:
        """A chunk's series per column, and whether a live column reads it at scrape time."""
        sizes, totals = self.sizes, self.totals
        for i, col in enumerate(self.columns):
            n = col.count(rows)
            totals[i] += n - sizes[i][c]
            sizes[i][c] = n
        if any(col.live(r) for col in self.columns if col.live is not None for r in rows):
            self.live.add(c)
        else:
            self.live.discard(c)

    def _counts(self) -> None:
        if self.stale:
            self._grow(self.sizes, 0)
            for c in self.stale:
                self._count(c, self._chunk(c))
            self.stale.clear()

    def _render(self, chunks: set[int]) -> None:
        self._grow(self.parts, b"")
        self._grow(self.sizes, 0)
        stale = self.stale
        for c in chunks:
            rows = self._chunk(c)
            if c in stale:
                self._count(c, rows)
            for i, col in enumerate(self.columns):
                self.parts[i][c] = col.render(rows).encode()
        stale -= chunks
        self.dirty -= chunks

    # -- the protobuf form -----------------------------------------------------------------

    def pb_pieces(self, index: int) -> list[bytes]:
        """One column's protobuf chunks as they are now (live ones rendered again)."""
        self.pb_refresh()
        pb = self.pb_parts
        assert pb is not None  # pb_refresh made it
        parts = pb[index]
        col = self.columns[index]
        if col.live is not None:
            self._counts()
            for c in self.live:
                parts[c] = self._pb_chunk(col, self._chunk(c), c=c)
        return [p for p in parts if p]

    def pb_refresh(self) -> None:
        """Render the protobuf form of every chunk changed since the last protobuf render."""
        self.pb_prime(len(self.keys))

    def pb_prime(self, budget: int) -> int:
        """Render the protobuf form of up to `budget` changed chunks (all columns); returns how
        many are left. The first call starts tracking changes for protobuf and has every chunk
        to render: called in slices ahead of a protobuf scrape, it keeps the loop free."""
        if self.pb_parts is None:
            self.pb_parts = [[] for _ in self.columns]
            self.pb_dirty = set(range((len(self.keys) + CHUNK - 1) >> SHIFT))
        self._pb_render(some(self.pb_dirty, budget))
        return len(self.pb_dirty)

    def _pb_render(self, chunks: set[int]) -> None:
        pb = self.pb_parts
        assert pb is not None
        self._grow(pb, b"")
        self._grow(self.sizes, 0)
        stale, live = self.stale, self.live
        for c in chunks:
            rows = self._chunk(c)
            if c in stale:
                self._count(c, rows)
            labels = self._pb_labels(c, rows)
            for i, col in enumerate(self.columns):
                if col.live is not None and c in live:
                    continue  # rendered at every scrape (pb_pieces)
                pb[i][c] = self._pb_chunk(col, rows, labels)
        stale -= chunks
        self.pb_dirty -= chunks

    def _pb_labels(self, c: int, rows: Sequence[Row]) -> list[bytes]:
        """Each row's labels as LabelPair fields, made at each protobuf render of its chunk (as
        the text blocks are: not kept beside the rows, ~26 MB at 100k rows)."""
        if self.pb_labels_of is None:
            return [encode_labels(b[1:]) for b, _ in rows]
        return self.pb_labels_of(*self._slots(c))

    def _pb_chunk(self, col: Column, rows: Sequence[Row],
                  labels: Sequence[bytes] | None = None, c: int = -1) -> bytes:
        if labels is None:
            labels = self._pb_labels(c, rows)
        if col.pb is None:
            raise TypeError(f"{col.family.metric.name}: a column without a protobuf renderer "
                            "cannot be scraped as protobuf")
        return col.pb(rows, labels)

    def _slots(self, c: int) -> tuple[list[Any], list[Any]]:
        """The keys and states of chunk `c`'s rows (free slots left out)."""
        lo, hi = c << SHIFT, (c + 1) << SHIFT
        keys, states = self.keys[lo:hi], self.states[lo:hi]
        if None in keys:  # free slots
            live = [i for i, k in enumerate(keys) if k is not None]
            keys, states = [keys[i] for i in live], [states[i] for i in live]
        return keys, states

    def _chunk(self, c: int) -> list[Row]:
        keys, states = self._slots(c)
        return list(zip(self.blocks_of(keys, states), states, strict=True))
