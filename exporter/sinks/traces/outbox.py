"""Exactly-once span export across restarts: spans leave only once a checkpoint covers them.

With `--state-dir`, a restart resumes each log at its checkpoint's cursor and applies the events
after it again, so the spans they end are built again. Exporting them before the checkpoint
covering them is saved would send them twice after a kill; exporting them after the save and
losing them in the export queue at a kill would lose them. Hence, with a checkpoint:

1. a finished span is *held* (numbered by a serial that the checkpoint carries on);
2. the checkpoint stores the held spans together with every released span not yet *handled*
   (accepted by the receiver, or given up after the exporter's retries), and after the save
   the held spans are *released* to the exporter; incrementally: each save adds the spans held
   since the last one and drops those at or below the mark (`to_store`);
3. the export thread writes the highest handled serial to a small file (`traces-acked`) after
   every batch; the batch processor exports in order, so every serial below it is handled too;
4. a restart re-sends the checkpoint's spans above that mark, then rebuilds the rest from the
   events after the cursor.

So no span is lost to a kill, and none is sent twice except when the process dies between a
receiver accepting a batch and the mark being written (microseconds). Such a duplicate has the
same trace id, span id, times and attributes (ids are derived), so backends that key spans by id
keep one. The price: spans reach the collector at the next checkpoint save, not at once.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from exporter.sinks.traces.builder import SpanRecord

ACKED_FILE = "traces-acked"
_WIDTH = 20  # digits: the mark is rewritten in place, never shorter


def encode(r: SpanRecord) -> list[Any]:
    return [r.name, f"{r.trace_id:032x}", f"{r.span_id:016x}", f"{r.parent_id:016x}",
            r.start_ns, r.end_ns, r.attributes, [list(e) for e in r.events], r.error]


def decode(a: list[Any]) -> SpanRecord:
    name, tid, sid, pid, start, end, attrs, events, error = a
    return SpanRecord(name, int(tid, 16), int(sid, 16), int(pid, 16), int(start), int(end),
                      dict(attrs), [(n, int(t), dict(ea)) for n, t, ea in events], error)


class AckMark:
    """The highest handled serial, in `<state dir>/traces-acked`: read at start, then written
    (in place, fixed width) by the export thread only."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        path = Path(state_dir) / ACKED_FILE
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        raw = os.pread(self.fd, _WIDTH + 1, 0).strip()
        self.value = int(raw) if raw.isdigit() else 0

    def advance(self, serial: int) -> None:
        if serial > self.value:
            self.value = serial
            os.pwrite(self.fd, f"{serial:0{_WIDTH}d}\n".encode(), 0)
            os.fdatasync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


class Outbox:
    """Held and released-but-unhandled spans, with their serials (see the module docstring).

    `hold` and the checkpoint hooks run on the event loop; `handled` runs in the export thread.
    The two share `_serial_of` (span id -> serial; single dict operations, atomic in CPython)
    and the mark (one writer).
    """

    def __init__(self, state_dir: str | os.PathLike[str],
                 send: Callable[[SpanRecord], None]) -> None:
        self.mark = AckMark(state_dir)
        self.send = send
        self.next_serial = self.mark.value + 1
        self.held: list[tuple[int, SpanRecord]] = []
        self.released: deque[tuple[int, SpanRecord]] = deque()
        self._serial_of: dict[int, int] = {}
        self.resent = 0  # spans sent again at start: released before a kill, never handled

    def hold(self, r: SpanRecord) -> None:
        self.held.append((self.next_serial, r))
        self.next_serial += 1

    def _prune(self) -> None:
        acked, rel = self.mark.value, self.released
        while rel and rel[0][0] <= acked:
            rel.popleft()
        so = self._serial_of
        if len(so) > len(rel):  # entries of spans the queue dropped (never handled one by one)
            for sid, serial in list(so.items()):
                if serial <= acked:
                    so.pop(sid, None)

    def state(self) -> dict[str, Any]:
        self._prune()
        return {"next": self.next_serial,
                "spans": [[serial, encode(r)] for serial, r in (*self.released, *self.held)]}

    def to_store(self) -> tuple[list[tuple[int, SpanRecord]], int]:
        """For an incremental checkpoint: the held spans (not stored yet), and the mark below
        which stored spans are handled and may go. The store then holds exactly `state()`'s
        spans: each span from its hold until the first save after it was handled."""
        return self.held, self.mark.value

    def saved(self, through: int | None = None) -> None:
        """The checkpoint holding the held spans (up to serial `through`) is on disk: release
        them. (A checkpoint taken later may still be being written: its spans wait for it.)"""
        held = self.held
        n = len(held) if through is None else next(
            (i for i, (serial, _) in enumerate(held) if serial > through), len(held))
        self.held = held[n:]
        for serial, r in held[:n]:
            self._release(serial, r)

    def restore(self, data: dict[str, Any]) -> None:
        """Re-send what the checkpoint holds above the mark; serials go on from its `next`."""
        self.next_serial = max(int(data["next"]), self.mark.value + 1)
        for serial, a in data["spans"]:
            if serial > self.mark.value:
                self._release(serial, decode(a))
                self.resent += 1

    def _release(self, serial: int, r: SpanRecord) -> None:
        self.released.append((serial, r))
        self._serial_of[r.span_id] = serial
        self.send(r)

    def handled(self, span_ids: Iterable[int]) -> None:
        """A batch was exported or given up (export thread)."""
        pop = self._serial_of.pop
        top = max((pop(sid, 0) for sid in span_ids), default=0)
        if top:
            self.mark.advance(top)

    def close(self) -> None:
        self.mark.close()
