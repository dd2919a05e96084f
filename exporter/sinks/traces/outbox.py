"""Exactly-once, lossless span export across restarts: the outbox is the export queue, and
spans leave it only once a checkpoint covers them and the collector has accepted them.

With `--state-dir`, a restart resumes each log at its checkpoint's cursor and applies the events
after it again, so the spans they end are built again. Exporting them before the checkpoint
covering them is saved would send them twice after a kill; losing them between the save and the
collector would lose them for good. Hence, with a checkpoint:

1. a finished span is *held* (numbered by a serial that the checkpoint carries on);
2. the checkpoint stores the held spans together with every released span the collector has not
   accepted yet, and after the save the held spans are *released*: appended, in serial order,
   to the spans waiting for export (incrementally: each save adds the spans held since the last
   one and drops those at or below the mark, `to_store`);
3. one export thread (`sender.Sender`) pulls the oldest waiting spans, a batch at a time, and
   retries a batch the collector does not accept, with backoff, for as long as it takes; once
   the collector accepts it, the batch's highest serial is written to a small file
   (`traces-acked`) and the batch leaves memory. Batches leave in serial order, one at a time, so
   every serial at or below the mark was accepted: the mark only moves over accepted spans,
   contiguously;
4. a restart re-sends the checkpoint's spans above that mark, then rebuilds the rest from the
   events after the cursor.

Nothing is pushed into a queue that could drop: what is in flight is one batch, and what waits
is here, in memory and in the checkpoint, until accepted. Memory is therefore what waits: the
spans of the last interval between checkpoints plus, during a collector outage, everything since
it began. That is bounded by `max_waiting` (`--otlp-max-pending-spans`): a span ended while that
many wait is refused, counted in `zaroz_traces_spans_dropped_total` and logged with the reason;
nothing else ever drops a span.

No span is lost to a kill, and none is sent twice except when the process dies between the
collector accepting a batch and the mark being written (milliseconds): such a batch is sent again
at the next start, counted in `zaroz_traces_spans_resent_total` (with everything else re-sent from
the checkpoint), and has the same trace ids, span ids, times and attributes (ids are derived), so
backends that key spans by id keep one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporter.sinks.traces.builder import SpanRecord

log = logging.getLogger("exporter.traces")

ACKED_FILE = "traces-acked"
_WIDTH = 20  # digits: the mark is rewritten in place, never shorter
DEFAULT_MAX_WAITING = 262_144  # ~0.2-0.5 GiB of spans in memory; ~70 s of a 4k spans/s burst
_OVERFLOW_LOG_S = 60.0  # at most one warning a minute while spans are refused


def encode(r: SpanRecord) -> list[Any]:
    return [r.name, f"{r.trace_id:032x}", f"{r.span_id:016x}", f"{r.parent_id:016x}",
            r.start_ns, r.end_ns, r.attributes, [list(e) for e in r.events], r.error]


def decode(a: list[Any]) -> SpanRecord:
    name, tid, sid, pid, start, end, attrs, events, error = a
    return SpanRecord(name, int(tid, 16), int(sid, 16), int(pid, 16), int(start), int(end),
                      dict(attrs), [(n, int(t), dict(ea)) for n, t, ea in events], error)


class AckMark:
    """The highest accepted serial, in `<state dir>/traces-acked`: read at start, then written
    (in place, fixed width) by the export thread only."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        path = Path(state_dir) / ACKED_FILE
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        raw = os.pread(self.fd, _WIDTH + 1, 0).strip()
        self.value = int(raw) if raw.isdigit() else 0

    def advance(self, serial: int) -> None:
        if serial > self.value:
            os.pwrite(self.fd, f"{serial:0{_WIDTH}d}\n".encode(), 0)
            os.fdatasync(self.fd)
            self.value = serial  # once durable: a checkpoint reading it may drop the spans

    def close(self) -> None:
        os.close(self.fd)


class Outbox:
    """Held spans, and released spans not accepted yet, with their serials (module docstring).

    `hold` and the checkpoint hooks run on the event loop; `take` and `accepted` in the export
    thread. `released` is shared under `_lock` (the export thread pops what was accepted while a
    whole save may be listing it); the mark has one writer.
    """

    def __init__(self, state_dir: str | os.PathLike[str],
                 max_waiting: int = DEFAULT_MAX_WAITING,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.mark = AckMark(state_dir)
        self.max_waiting = max_waiting
        self.clock = clock
        self.next_serial = self.mark.value + 1
        self.held: list[tuple[int, SpanRecord]] = []
        self.released: deque[tuple[int, SpanRecord]] = deque()
        self.resent = 0  # spans sent again at start: released before a kill, never accepted
        self.refused = 0  # spans refused: `max_waiting` spans were waiting
        self._refused_logged = 0
        self._logged_at: float | None = None
        self._lock = threading.Condition()
        self._closed = False

    # -- the event loop's side -------------------------------------------------------------------

    def waiting(self) -> int:
        """Spans held or released and not accepted yet (in memory, and in the checkpoint)."""
        return len(self.held) + len(self.released)

    def hold(self, r: SpanRecord) -> bool:
        """Keep `r` for the next checkpoint; False (counted, logged) when `max_waiting` wait."""
        if len(self.held) + len(self.released) >= self.max_waiting:
            self.refused += 1
            self._log_refused()
            return False
        self.held.append((self.next_serial, r))
        self.next_serial += 1
        return True

    def _log_refused(self) -> None:
        now = self.clock()
        if self._logged_at is not None and now - self._logged_at < _OVERFLOW_LOG_S:
            return
        self._logged_at = now
        log.warning("spans dropped: too many wait for the OTLP collector", extra={
            "reason": "waiting spans at --otlp-max-pending-spans",
            "max_pending_spans": self.max_waiting, "waiting": self.waiting(),
            "dropped": self.refused - self._refused_logged})
        self._refused_logged = self.refused

    def state(self) -> dict[str, Any]:
        with self._lock:
            released = list(self.released)
        return {"next": self.next_serial,
                "spans": [[serial, encode(r)] for serial, r in (*released, *self.held)]}

    def to_store(self) -> tuple[list[tuple[int, SpanRecord]], int]:
        """For an incremental checkpoint: the held spans (not stored yet), and the mark below
        which stored spans are accepted and may go. The store then holds exactly `state()`'s
        spans (and, until the next save, those accepted since this one)."""
        return self.held, self.mark.value

    def saved(self, through: int | None = None) -> None:
        """The checkpoint holding the held spans (up to serial `through`) is on disk: release
        them. (A checkpoint taken later may still be being written: its spans wait for it.)"""
        held = self.held
        n = len(held) if through is None else next(
            (i for i, (serial, _) in enumerate(held) if serial > through), len(held))
        if n:
            self.held = held[n:]
            with self._lock:
                self.released.extend(held[:n])
                self._lock.notify()

    def restore(self, data: dict[str, Any]) -> None:
        """Re-send what the checkpoint holds above the mark; serials go on from its `next`."""
        self.next_serial = max(int(data["next"]), self.mark.value + 1)
        again = [(serial, decode(a)) for serial, a in data["spans"] if serial > self.mark.value]
        with self._lock:
            self.released.extend(again)
            self._lock.notify()
        self.resent += len(again)

    # -- the export thread's side ----------------------------------------------------------------

    def take(self, n: int, timeout: float | None) -> list[tuple[int, SpanRecord]]:
        """The `n` oldest released spans (left in place until `accepted`), waiting up to
        `timeout` for one; [] when none (or closed)."""
        with self._lock:
            if not self.released and not self._closed:
                self._lock.wait(timeout)
            rel = self.released
            return [rel[i] for i in range(min(n, len(rel)))]

    def accepted(self, batch: list[tuple[int, SpanRecord]]) -> None:
        """The collector accepted `batch` (the oldest released spans, from `take`): the mark
        moves over it, durably, then it leaves memory."""
        if not batch:
            return
        self.mark.advance(batch[-1][0])
        with self._lock:
            rel = self.released
            for _ in range(len(batch)):
                rel.popleft()

    def wake(self) -> None:
        """Stop waiting in `take` (shutdown)."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    def close(self) -> None:
        self.mark.close()
