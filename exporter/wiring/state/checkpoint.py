"""Checkpoints: each workload's cursor and model state, and every counter and histogram, in
`--state-dir`, so that a restart neither counts an event twice nor misses one, for any number
of scrapers.

Counters continue across a restart: the checkpoint holds their values (sinks.metrics.state) and
a new process starts from them, never from zero. A scraper therefore never sees a reset, and what
it reads after the restart is the same total an uninterrupted process would show, whichever
scrapes it made or missed before (two Prometheus replicas, a reply lost with the process).
Events applied after the checkpoint are applied again from its cursor, exactly once, since the
counters restored are those of that cursor.

No scraper may have seen more than the checkpoint holds, or the restored counters would go
backwards (a reset to Prometheus). So what changed is taken just before each scrape is rendered,
with no await in between, and the exposition is sent only once that checkpoint is durable
(`render_checkpointed_async`: the write itself runs in the checkpointer's one writer thread, off
the event loop, in the order the saves were taken; `render_checkpointed` and `save` wait for it
in place). Besides, a checkpoint is saved `--checkpoint-interval` seconds after the last one
(0.25 s: a scrape's own commit then holds that little, whatever the scrape interval) and at
shutdown. A checkpoint newer than the last scrape is harmless: its counts are exposed next time.

Each save writes only what changed since the last one, as one batch appended to the store's log
(wiring/state/store.py): the model and the series record what they change as they go (O(1) per
change: a set of unit ids per WorkloadLog, a list of changed series per family, the workloads
that moved), and a save turns those into rows, so its work grows with the events since the last
save, not with the fleet. The first save of a process that loaded no checkpoint (a fresh disk,
--start-from head or earliest) replaces the whole store once; its rows are taken ahead in
slices between turns of the event loop (`take_ahead`), and what changes after its slice is
taken again by the save that completes it, which is then exactly the state at its own moment.
The model's state (pending events, units in flight, event clock) is part of it, so an interval
that spans a restart (created before, ready after) is still measured.

A write that fails (a full disk, any error) fails its save and those waiting on it, but what it
took is kept by the store and folded into the next write (a later row of a key wins), so each
attempt costs what changed since the last durable save, in the writer thread, and the first
write that succeeds makes all of it durable again.

An older checkpoint (checkpoint.json of version 1 or 2, SQLite's state.db of version 3) is
loaded once and converted: the store is written whole, then the old file is renamed *.converted
(kept for an operator to delete; nothing reads it again). From then on the store is
authoritative.

A lock (flock) on the state directory keeps a second exporter from sharing it; `serve` takes it
at start. A store whose integrity check fails (its read, which checks every block's checksum, or
Store.verify before a start that ignores it) is never restored nor replaced: the
start ends with one line naming the fix (FIX).

With traces on, the trace sink's state (open spans per unit, spans not yet exported) is stored
incrementally too, and spans are exported only once a checkpoint covers them
(sinks/traces/outbox.py). With UnitSignals watched, so is the UnitSignal model's memory of what
it measured (`SignalMemory`, wiring/unitsignals.py), restored before the first list.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import logging
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import orjson

from exporter.model.sharding import Shard
from exporter.model.unitsignals import MEMORY_VERSION
from exporter.sinks.metrics.checkpoint import CheckpointMetrics
from exporter.sinks.metrics.exposition import Format, render
from exporter.sinks.metrics.family import AnyFamily, Registry
from exporter.sinks.metrics.otlp.starts import StartTimes
from exporter.sinks.metrics.series import HistogramSeries, Series
from exporter.sinks.metrics.state import (
    changes_left,
    json_text,
    metric_state,
    restore_metrics,
    take_changes,
    track,
)
from exporter.sinks.traces.builder import unit_state
from exporter.sinks.traces.outbox import encode as encode_span
from exporter.wiring.events import Pipeline
from exporter.wiring.state import convert
from exporter.wiring.state.store import DB, VERSION, Changes, Store, fsync_path
from exporter.wiring.unitsignals import SignalMemory

log = logging.getLogger(__name__)

FILE = "checkpoint.json"  # versions 1 and 2: converted into the store once
CONVERTED = FILE + ".converted"
LOCK = "lock"
JSON_VERSIONS = (1, 2)  # 1: no counters (they restart at zero)
# Rows a whole save takes per turn of the event loop (take_ahead): about 3 µs each (0.3 s for
# 103,000 rows in one go), so a slice holds the loop for some 5-20 ms.
SLICE_ROWS = 2000
# What an operator does about a checkpoint that cannot be restored (docs/operations.md).
FIX = ("restore a backup (`zaroz-exporter state backup`) into an empty --state-dir, or move "
       "the directory away and start with --start-from head or earliest (counters restart)")

_NO_SPACE = "No space left on device"  # LevelDB's IO error (strerror of ENOSPC)


class CheckpointError(Exception):
    """The checkpoint could not be written or read."""


class Checkpointer:
    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        pipeline: Pipeline,
        metrics: CheckpointMetrics | None = None,
        *,
        clock: Callable[[], float] = time.time,
        shard: Shard | None = None,
        signals: SignalMemory | None = None,
        starts: StartTimes | None = None,
    ) -> None:
        """`signals`: the UnitSignal model's memory, kept with the rest (when UnitSignals are
        watched), so a restart does not measure unchanged objects again."""
        self.dir = Path(state_dir)
        # A load restores only this shard's workloads; the others are dropped (`_drop_foreign`).
        self.shard = shard if shard is not None else Shard()
        self.path = self.dir / FILE
        self.store = Store(self.dir / DB)
        self.legacy = convert.Store(self.dir / convert.DB)  # version 3: converted once
        self.pipeline = pipeline
        self.metrics = metrics if metrics is not None else CheckpointMetrics(pipeline.registry)
        self.clock = clock
        # Workloads held out of the exposition (Registry.hold) when the loaded checkpoint was
        # saved: their counters were never exposed, so they are held again until caught up.
        self.held_at_save: frozenset[str] = frozenset()
        self._held: frozenset[str] = frozenset()  # as last stored
        self._lock_fd: int | None = None
        # Set by the first save or load: the families whose changes are tracked, and whether
        # the store holds everything but those changes (else the next save replaces it).
        self._families: list[AnyFamily] | None = None
        self._synced = False
        self._whole: _Whole | None = None  # a whole save being taken ahead (take_ahead)
        self._traces_meta: str | None = None
        self.signals = signals
        # The cumulative series' start times, stored with them (sinks/metrics/otlp/starts.py).
        self.starts = starts if starts is not None else StartTimes()
        self._signals_meta: str | None = None
        self._signals_stale = False  # the loaded rows are of a form not read: rewrite whole
        self.last_rows = 0  # rows written or removed by the last save
        self._pool: ThreadPoolExecutor | None = None
        if pipeline.traces is not None:
            try:
                self.lock()  # the trace sink keeps a file beside the checkpoint
                pipeline.traces.checkpointed(self.dir)
            except OSError as e:
                raise CheckpointError(f"cannot keep trace state in {self.dir}: {e}") from e

    # -- state --------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The whole state in memory, in the store's `read` form (tests compare the two)."""
        held = self.pipeline.registry.held.names  # as of the last scrape
        workloads = {}
        for w, wl in self.pipeline.logs.items():
            entry: dict[str, Any] = {"cursor": wl.applied_through, "log": wl.snapshot()}
            if w in held:  # never exposed by this process: held again after a restart
                entry["held"] = True
            labels = getattr(wl.obs, "label_state", None)
            if labels is not None:
                entry["labels"] = labels()
            workloads[w] = entry
        out: dict[str, Any] = {"v": VERSION, "workloads": workloads,
                               "metrics": metric_state(self.pipeline.registry)}
        if self.pipeline.traces is not None:
            out["traces"] = self.pipeline.traces.state()
        if self.signals is not None:
            out["unitsignals"] = self.signals.state()
        return out

    def _track(self, stored: set[Series | HistogramSeries] | None) -> None:
        """Record changes from now on; `stored`: the series the store holds (None: a save
        must write everything, so every log, trace and series counts as changed)."""
        p = self.pipeline
        moved = p.track()
        self._families = track(p.registry, stored)
        if stored is None:
            for name, wl in p.logs.items():
                wl.track(name, moved)
            if p.traces is not None:
                p.traces.track(moved)
            if self.signals is not None:
                self.signals.track()
            self._traces_meta = self._signals_meta = None
        else:
            moved.clear()
            for wl in p.logs.values():
                wl.taken()
            if p.traces is not None:
                for b in p.traces.builders.values():
                    b.taken()
            if self.signals is not None:
                self.signals.taken()
        self._synced = stored is not None

    def changes(self) -> Changes:
        """The rows of everything changed since the last save; from then on it counts as
        saved (the caller writes them, or fails the scrape). A whole save (`full`) includes
        what `take_ahead` took of it already."""
        p = self.pipeline
        full = not self._synced
        if full and self._whole is None:
            self._begin_whole()
        whole = self._whole
        assert self._families is not None and p.moved is not None
        ch = Changes(full=full)
        held = p.registry.held.names
        moved = p.moved
        if p.dropped:
            ch.workloads_gone = [(w,) for w in p.dropped]
            p.dropped.clear()
        if held != self._held:
            moved |= held ^ self._held
            self._held = held
        if whole is not None:  # rows taken ahead while a workload was held, or not
            moved |= {w for w, h in whole.held.items() if h is not (w in held)}
        for w in moved:
            self._take_workload(w, ch, held)
        moved.clear()
        ch.series, ch.series_gone = take_changes(self._families)
        self.starts.seen(ch.series, ch.series_gone)
        traces = p.traces
        dumps = json_text
        if traces is not None:
            box = traces.outbox
            meta = dumps({"next": None if box is None else box.next_serial,
                          "stats": traces.freeze()})
            if box is not None:
                held_spans, ch.spans_through = box.to_store()
                ch.held_through = box.next_serial - 1
                ch.spans = [(serial, dumps(encode_span(r))) for serial, r in held_spans]
                if full:  # and those released but not handled yet
                    ch.spans = [(serial, dumps(a)) for serial, a in box.state()["spans"]]
            if meta != self._traces_meta:
                ch.meta.append(("traces", meta))
                self._traces_meta = meta
        if self.signals is not None:
            ch.unitsignals, ch.unitsignals_gone = self.signals.take()
            meta = dumps({"v": MEMORY_VERSION})
            if meta != self._signals_meta:
                ch.meta.append(("unitsignals", meta))
                self._signals_meta = meta
        if whole is not None:
            self._whole = None
            ch = whole.merged(ch)
        ch.starts, ch.starts_gone = self.starts.take(ch.full)
        return ch

    def _take_workload(self, w: str, ch: Changes, held: frozenset[str]) -> None:
        """A workload's row and every row of it changed since the last take, into `ch`."""
        p, dumps = self.pipeline, json_text
        row: dict[str, Any] = {}
        wl = p.logs.get(w)
        if wl is not None:
            row = wl.head()
            if w in held:
                row["held"] = True
            labels = getattr(wl.obs, "label_state", None)
            if labels is not None:
                row["labels"] = labels()
            _unit_rows(w, wl.take_units(), ch)
            for seq, waits, ev in wl.take_pending():
                if waits:
                    ch.pending.append((w, seq, None if ev is None else dumps(ev)))
                else:
                    ch.pending_gone.append((w, seq))
        b = p.traces.builders.get(w) if p.traces is not None else None
        if wl is None and b is None:
            return  # dropped (its rows go with `workloads_gone`)
        if b is not None:
            row["trace_expired"] = b.expired
            if b.touched:
                for uid in b.touched:
                    t = b.units.get(uid)
                    if t is None:
                        ch.traces_gone.append((w, uid))
                    else:
                        ch.traces.append((w, uid, dumps(unit_state(t))))
                b.touched.clear()
        ch.workloads.append((w, dumps(row)))

    # -- a whole save, taken ahead in slices ----------------------------------------------------

    def _begin_whole(self) -> None:
        """Everything counts as changed from now on, and is taken into one whole save."""
        self._track(None)
        assert self.pipeline.moved is not None
        self._whole = _Whole(sorted(self.pipeline.moved, reverse=True))

    def take_ahead_step(self) -> bool:
        """Take one slice (about SLICE_ROWS rows) of a whole save that is due (a process that
        loaded no checkpoint, or after a failed write); True while more is left. What is taken
        counts as stored for the save that completes it (`changes`): a workload, unit or series
        that changes after its slice is taken again there, so that save is still exactly the
        state at its own moment. Nothing is written here."""
        if self._synced:
            return False
        if self._whole is None:
            self._begin_whole()
        whole = self._whole
        assert whole is not None and self._families is not None
        p = self.pipeline
        assert p.moved is not None
        held = p.registry.held.names
        budget = SLICE_ROWS
        ch = Changes()
        while whole.todo and budget > 0:
            w = whole.todo[-1]
            wl = p.logs.get(w)
            if wl is not None and wl.touched is not None and len(wl.touched) > budget:
                if budget == SLICE_ROWS:  # a large workload: part of its units
                    _unit_rows(w, wl.take_units(budget), ch)
                break  # (else whole, in the next slice: its rows stay in order)
            whole.todo.pop()
            if w in p.moved:
                before = ch.rows()
                self._take_workload(w, ch, held)
                p.moved.discard(w)
                whole.held[w] = w in held
                budget -= ch.rows() - before
        if not whole.todo and budget > 0 and changes_left(self._families) > SLICE_ROWS:
            rows, gone = take_changes(self._families, budget)
            ch.series, ch.series_gone = rows, gone
            self.starts.seen(rows, gone)
        signals = self.signals
        if not whole.todo and budget > 0 and signals is not None and signals.left() > SLICE_ROWS:
            ch.unitsignals, ch.unitsignals_gone = signals.take(budget)
        whole.add(ch)
        return bool(whole.todo) or changes_left(self._families) > SLICE_ROWS or (
            signals is not None and signals.left() > SLICE_ROWS)

    async def take_ahead(self) -> None:
        """`take_ahead_step` until a whole save that is due has little left, yielding to the
        event loop between slices (a fresh process's first save takes every row of the state:
        0.3 s at 100,000 units in one go). The save that follows (`begin_save`) takes the rest
        with no await before its render, as any save."""
        while self.take_ahead_step():
            await asyncio.sleep(0)

    def save(self) -> bool:
        """Write what changed since the last save; True when something was written.
        Synchronous: returns once it is durable (with every save begun before it). Raises
        CheckpointError when it cannot be written (the store keeps what it took for the next
        write)."""
        start = time.perf_counter()
        ch = self._prepare()
        try:
            written = self._writer().submit(self._write, ch).result()
        except Exception as e:
            raise self._failed(e) from e
        return self._done(ch, start, written)

    def begin_save(self) -> Callable[[], Awaitable[bool]]:
        """`save` in two halves: what changed is taken now, on the caller's thread (O(changes),
        so that nothing is applied between it and a render), and written in the writer thread;
        the returned coroutine function waits until it is durable (and everything begun before
        it), then says whether something was written, or raises CheckpointError."""
        start = time.perf_counter()
        ch = self._prepare()
        written = self._writer().submit(self._write, ch)

        async def durable() -> bool:
            try:
                # Shielded: cancelling the waiter (shutdown cancels the periodic save) would
                # cancel the write itself while it is queued, and its changes are taken.
                rows = await asyncio.shield(asyncio.wrap_future(written))
            except Exception as e:
                raise self._failed(e) from e
            return self._done(ch, start, rows)

        return durable

    def begin_write(self, on_done: Callable[[], None]) -> Callable[[], bool]:
        """`begin_save` without a wait on the loop: `on_done` is called in the writer thread
        once the write ended (the group commit's one hop back to the loop), and the returned
        function, called on the loop after that, says whether something was written or raises
        CheckpointError, as the coroutine of `begin_save` does."""
        start = time.perf_counter()
        ch = self._prepare()
        written = self._writer().submit(self._write, ch)
        written.add_done_callback(lambda _: on_done())

        def finish() -> bool:
            try:
                rows = written.result(timeout=0)
            except Exception as e:
                raise self._failed(e) from e
            return self._done(ch, start, rows)

        return finish

    def _prepare(self) -> Changes | None:
        """The changes to write (None: nothing changed); from then on they count as stored."""
        try:
            self.lock()
            ch = self.changes()
        except Exception as e:  # whatever it is, a failed save: never a dead task or scrape
            self._synced = False  # taken in part: the next save writes everything
            self._whole = None  # (taken again from the start)
            raise self._failed(e) from e
        self._synced = True
        if (not ch.full and not ch.rows() and ch.spans_through <= self.store.spans_through
                and self.store.unstored is None):
            return None
        return ch

    def _write(self, ch: Changes | None) -> tuple[int, int]:
        """The writer thread's part: one batch, or (nothing changed) the changes of a write
        that failed before it, if any, written again; the rows and bytes written."""
        if ch is not None:
            return self.store.write(ch)
        if self.store.unstored is not None:
            return self.store.write(Changes())
        return 0, 0

    def _writer(self) -> ThreadPoolExecutor:
        # One thread, so saves are written in the order they were taken (LevelDB leaves the
        # GIL while it writes and fsyncs).
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoint")
        return self._pool

    def failed(self, e: BaseException) -> CheckpointError:
        """A save that raised something other than CheckpointError: counted and logged as a
        failure like any other."""
        return self._failed(e)

    def _failed(self, e: BaseException) -> CheckpointError:
        self.metrics.saved("error")
        log.error("checkpoint not written", extra={
            "state_dir": str(self.dir), "error": f"{e.__class__.__name__}: {e}"})
        return CheckpointError(f"cannot write checkpoint in {self.dir}: {e}")

    def _done(self, ch: Changes | None, start: float, written: tuple[int, int]) -> bool:
        """`written`: the rows and bytes the store wrote (with those of failed writes before)."""
        self.last_rows, size = written
        if ch is None and not self.last_rows:
            self.metrics.saved("unchanged", self.clock())
            return False
        self.metrics.saved("written", self.clock(), time.perf_counter() - start, size)
        if ch is not None and self.pipeline.traces is not None:  # its spans may leave now
            self.pipeline.traces.saved(ch.held_through)
        return True

    def load(self) -> int:
        """Restore every workload of the checkpoint into the pipeline (before the tailers and the
        webhook receiver start); returns how many. No checkpoint: 0. A checkpoint that cannot be
        read raises CheckpointError: starting over silently would count everything again."""
        self.lock()
        collecting = gc.isenabled()
        gc.disable()  # a restore makes objects by the million, none of them garbage
        try:
            return self._load()
        finally:
            if collecting:
                gc.enable()

    def _load(self) -> int:
        state, source = self._read()
        if state is None:
            log.info("no checkpoint: starting at the beginning of each log",
                     extra={"state_dir": str(self.dir)})
            return 0
        restored: set[Series | HistogramSeries] = set()
        try:
            skipped = self._restore(state, restored)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(
                f"checkpoint {source} is unreadable ({e}); {FIX}") from e
        if state["v"] == 1:
            log.warning("checkpoint of version 1: counters restart at zero once",
                        extra={"state_dir": str(self.dir)})
        if skipped:
            log.warning("metrics whose labels or buckets changed since the checkpoint restart "
                        "at zero once", extra={"state_dir": str(self.dir),
                                               "metrics": ",".join(skipped)})
        owns = self.shard.owns
        self.held_at_save = self._held = frozenset(
            w for w, e in state["workloads"].items() if e.get("held") and owns(w))
        if state["v"] == VERSION:
            self._track(restored)
            self._drop_foreign(state)
            if self.signals is not None and "unitsignals" in state:
                self._signals_meta = json_text({"v": state["unitsignals"]["v"]})
            # Rows this version does not read (a family whose labels changed, or left the
            # catalog; trace state with traces off, or none with them on) would stay in the
            # store and be refused again at every start: the first save rewrites it whole.
            registry = self.pipeline.registry
            if skipped or any(n not in registry.families for n in state["metrics"]) or (
                    "traces" in state) != (self.pipeline.traces is not None) or (
                    self.signals is None and "unitsignals" in state) or self._signals_stale or (
                    state["metrics"] and not self.starts.known):  # saved without start times
                self._synced = False
        else:  # converted: the store is written whole, then the old file is put aside
            self._track(None)
            self._drop_foreign(state)
            # Nothing is exposed yet: what was held at that save is held as of now.
            self.pipeline.registry.hold(self.held_at_save)
            self.save()
            self._put_aside(self.legacy.path if source == self.legacy.path else self.path,
                            converted=True)
        n = len(self.pipeline.logs)
        log.info("checkpoint restored", extra={"state_dir": str(self.dir), "workloads": n})
        return n

    def verify(self) -> None:
        """The store's own check (every row with its checksums; Store.verify without decoding):
        raises CheckpointError naming the fix when it fails. For a start that ignores the
        checkpoint (--start-from head or earliest): its first save replaces the store, which a
        damaged one may refuse. A start that loads checks as it reads (`_read`)."""
        if not self.store.exists():
            return
        problems = self.store.verify(decode=False)
        if problems:
            more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
            raise CheckpointError(f"checkpoint {self.store.path} is damaged "
                                  f"({problems[0]}{more}); {FIX}")

    def _read(self) -> tuple[dict[str, Any] | None, Path]:
        state = None
        for store in (self.store, self.legacy):
            if store.exists():
                # The read checks every block's checksum as it goes (a damaged store fails it):
                # no separate pass over the store before it.
                try:
                    state = store.read()
                except Exception as e:
                    if _NO_SPACE in str(e):  # opening writes (the log into a table)
                        raise CheckpointError(
                            f"checkpoint {store.path} cannot be opened: its file system is full "
                            f"({e}); the checkpoint is intact: free space there (or grow the "
                            f"volume) and start again") from e
                    raise CheckpointError(
                        f"checkpoint {store.path} is unreadable ({e}); {FIX}") from e
                finally:
                    if store is self.legacy:
                        store.close()
            if state is not None:
                if store is self.store:  # converted before a kill that came before the rename
                    for old in (self.legacy.path, self.path):
                        if old.exists():
                            self._put_aside(old, converted=False)
                return state, store.path
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None, self.path
        except OSError as e:
            raise CheckpointError(f"cannot read {self.path}: {e}") from e
        try:
            state = orjson.loads(raw)
            if type(state) is not dict or state.get("v") not in JSON_VERSIONS:
                got = state.get("v") if type(state) is dict else None
                raise ValueError(f"unsupported checkpoint version {got!r}")
        except ValueError as e:  # orjson.JSONDecodeError is one
            raise CheckpointError(
                f"checkpoint {self.path} is unreadable ({e}); {FIX}") from e
        return state, self.path

    def _restore(self, state: dict[str, Any], restored: set[Series | HistogramSeries],
                 ) -> list[str]:
        owns = self.shard.owns
        for w, entry in state["workloads"].items():
            if not owns(w):
                continue  # another shard's now: its series go with it (_drop_foreign)
            wl = self.pipeline.workload(w)
            wl.restore(entry["log"])
            restore_labels = getattr(wl.obs, "restore_label_state", None)
            if restore_labels is not None and "labels" in entry:
                restore_labels(entry["labels"])
            if "desired" in entry:  # version 1
                wl.restore_desired(entry["desired"])
        skipped = restore_metrics(self.pipeline.registry, state.get("metrics", {}), restored)
        live = {(s.family.metric.name, json_text(list(s.values))) for s in restored}
        self.starts.restore(state.get("rows", {}).get("starts", []), live)
        if self.pipeline.traces is not None and state.get("traces") is not None:
            self.pipeline.traces.restore(state["traces"])
        if self.signals is not None:
            self._restore_signals(state.get("unitsignals"))
        return skipped

    def _drop_foreign(self, state: dict[str, Any]) -> None:
        """Workloads of the checkpoint that another shard owns now (the shard count or index
        changed since it was saved): that shard exports them from its own state, so this one
        drops them, their series (restored with every counter) and their stored rows (at the
        next save), or every sum() over the shards would count them twice."""
        foreign = [w for w in state["workloads"] if not self.shard.owns(w)]
        if foreign:
            self.pipeline.drop(foreign, "other_shard", every_group=True)
            log.warning("checkpoint workloads owned by other shards dropped", extra={
                "state_dir": str(self.dir), "workloads": len(foreign),
                "kept": len(state["workloads"]) - len(foreign),
                "shard": self.shard.index, "shards": self.shard.total})

    def _restore_signals(self, stored: dict[str, Any] | None) -> None:
        """The UnitSignal model's memory, before the first list; a checkpoint without it (saved
        by an earlier version) or with another form of it lets the first list measure every
        object once more, as any first sight does."""
        assert self.signals is not None
        if stored is not None and stored.get("v") == MEMORY_VERSION:
            n = self.signals.restore(stored)
            log.info("UnitSignal memory restored", extra={"state_dir": str(self.dir),
                                                          "unitsignals": n})
            return
        log.warning("the checkpoint holds no UnitSignal memory this version reads: the first "
                    "list measures every UnitSignal once more (readiness, violations, clock "
                    "skew), as after a start without a checkpoint",
                    extra={"state_dir": str(self.dir),
                           "stored_version": None if stored is None else stored.get("v")})
        self._signals_stale = stored is not None  # its rows go with a whole save

    def _put_aside(self, path: Path, converted: bool) -> None:
        """The old checkpoint renamed *.converted (SQLite's -wal and -shm with it)."""
        try:
            for f in (path, path.with_name(path.name + "-wal"),
                      path.with_name(path.name + "-shm")):
                if f.exists():
                    os.replace(f, f.with_name(f.name + ".converted"))
            fsync_path(self.dir)
        except OSError as e:
            raise CheckpointError(f"cannot rename {path}: {e}") from e
        log.warning(f"{path.name} converted into the store; the old file is kept as "
                    f"{path.name}.converted, read by nothing, and may be deleted"
                    if converted else f"{path.name} was converted before: moved to "
                    f"{path.name}.converted", extra={"state_dir": str(self.dir)})

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self.store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def lock(self) -> None:
        """Take the state directory's lock (once; every save and load takes it too): raises
        CheckpointError when another exporter holds it. A start takes it before anything else,
        whichever --start-from, so a second exporter on the directory ends at once."""
        if self._lock_fd is not None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            raise CheckpointError(f"{self.dir} is in use by another exporter") from e
        self._lock_fd = fd



def _unit_rows(w: str, taken: list[tuple[str, list[Any] | None]], ch: Changes) -> None:
    for uid, u in taken:
        if u is None:
            ch.units_gone.append((w, uid))
        else:
            ch.units.append((w, uid, *u))


def _keyed(rows: dict[Any, Any], written: list[Any], gone: list[Any]) -> None:
    for r in gone:
        rows[r[0], r[1]] = None
    for r in written:
        rows[r[0], r[1]] = r


class _Whole:
    """The rows of a whole save taken so far, by key: a row taken again (it changed since)
    replaces the earlier one, a row gone since removes it."""

    def __init__(self, todo: list[str]) -> None:
        self.todo = todo  # workloads still to take, the next last
        self.held: dict[str, bool] = {}  # whether each workload taken was held at its take
        self.workloads: dict[str, tuple[str, str]] = {}
        self.units: dict[Any, Any] = {}
        self.pending: dict[Any, Any] = {}
        self.series: dict[Any, Any] = {}
        self.traces: dict[Any, Any] = {}
        self.unitsignals: dict[Any, Any] = {}

    def add(self, ch: Changes) -> None:
        for r in ch.workloads:
            self.workloads[r[0]] = r
        _keyed(self.units, ch.units, ch.units_gone)
        _keyed(self.pending, ch.pending, ch.pending_gone)
        _keyed(self.series, ch.series, ch.series_gone)
        _keyed(self.traces, ch.traces, ch.traces_gone)
        _keyed(self.unitsignals, ch.unitsignals, ch.unitsignals_gone)

    def merged(self, last: Changes) -> Changes:
        """The whole save: every row taken, with `last` (the final take) over them."""
        self.add(last)
        return Changes(
            full=True, workloads=list(self.workloads.values()),
            units=[r for r in self.units.values() if r is not None],
            pending=[r for r in self.pending.values() if r is not None],
            series=[r for r in self.series.values() if r is not None],
            traces=[r for r in self.traces.values() if r is not None],
            spans=last.spans, spans_through=last.spans_through,
            held_through=last.held_through, meta=last.meta,
            unitsignals=[r for r in self.unitsignals.values() if r is not None])


def render_checkpointed(registry: Registry, openmetrics: bool | Format,
                        checkpointer: Checkpointer | None) -> list[bytes]:
    """Save the checkpoint, then render the whole exposition, with no await in between or
    during: the exposition is then exactly the checkpointed state. Raises CheckpointError (the
    scrape must then fail: exposing unsaved counts would count them twice after a crash)."""
    if checkpointer is not None:
        try:
            checkpointer.save()
        except CheckpointError:
            raise
        except Exception as e:
            raise checkpointer.failed(e) from e
    return list(render(registry, openmetrics))


class BeginsSaves(Protocol):
    """What a scrape saves through: a `Checkpointer`, or the group commit that numbers its
    saves for the webhook's deliveries (wiring/state/commits.py)."""

    def begin_save(self) -> Callable[[], Awaitable[bool]]: ...

    async def take_ahead(self) -> None: ...

    def failed(self, e: BaseException) -> CheckpointError: ...


async def render_checkpointed_async(registry: Registry, openmetrics: bool | Format,
                                    checkpointer: BeginsSaves | None,
                                    rendered: list[float] | None = None) -> list[bytes]:
    """`render_checkpointed`, with the checkpoint written off the event loop: what changed is
    taken, then the whole exposition rendered, with no await in between (the exposition is
    exactly the checkpointed state), and only then does it wait for the write to be durable.
    The caller sends nothing before this returns; raises CheckpointError as the other does.
    `rendered`: gets the perf_counter at which the render ended (the scrape's Server-Timing)."""
    if checkpointer is None:
        return list(render(registry, openmetrics))
    await checkpointer.take_ahead()  # a whole save due: most of it in slices, first
    try:
        durable = checkpointer.begin_save()
    except CheckpointError:
        raise
    except Exception as e:
        raise checkpointer.failed(e) from e
    chunks = list(render(registry, openmetrics))
    if rendered is not None:
        rendered.append(time.perf_counter())
    try:
        await durable()
    except CheckpointError:
        raise
    except Exception as e:
        raise checkpointer.failed(e) from e
    return chunks
