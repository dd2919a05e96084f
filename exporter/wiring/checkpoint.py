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
backwards (a reset to Prometheus). So the checkpoint is saved synchronously just before each
scrape is rendered (`render_checkpointed`, no await in between), and besides every
`--checkpoint-interval` seconds and at shutdown, each time with the whole state of that moment.
A checkpoint newer than the last scrape is harmless: its counts are exposed next time.

The whole state is one file, replaced atomically (temp file, fsync, rename, fsync of the
directory). The model's state (pending events, units in flight, event clock) is part of it, so
an interval that spans a restart (created before, ready after) is still measured.

A lock (flock) on the state directory keeps a second exporter from sharing it.

With traces on, the trace sink's state (open spans, spans not yet exported) is stored under its
own key, and spans are exported only once a checkpoint covers them (sinks/traces/outbox.py).
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from exporter.sinks.metrics.checkpoint import CheckpointMetrics
from exporter.sinks.metrics.exposition import Format, render
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.state import metric_state, restore_metrics
from exporter.wiring.events import Pipeline

log = logging.getLogger(__name__)

FILE = "checkpoint.json"
LOCK = "lock"
VERSION = 2
VERSIONS = (1, 2)  # 1: no counters (they restart at zero)


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
    ) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / FILE
        self.pipeline = pipeline
        self.metrics = metrics if metrics is not None else CheckpointMetrics(pipeline.registry)
        self.clock = clock
        self._last: bytes | None = None
        # Workloads held out of the exposition (Registry.hold) when the loaded checkpoint was
        # saved: their counters were never exposed, so they are held again until caught up.
        self.held_at_save: frozenset[str] = frozenset()
        self._lock_fd: int | None = None
        if pipeline.traces is not None:
            try:
                self._lock()  # the trace sink keeps a file beside the checkpoint
                pipeline.traces.checkpointed(self.dir)
            except OSError as e:
                raise CheckpointError(f"cannot keep trace state in {self.dir}: {e}") from e

    # -- state --------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
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
        return out

    def save(self) -> bool:
        """Write the checkpoint if the state changed; True when written. Synchronous on purpose
        (see the module docstring). Raises CheckpointError when it cannot be written."""
        start = time.perf_counter()
        try:
            self._lock()
            data = orjson.dumps(self.state())
            if data == self._last:
                self.metrics.saved("unchanged")
                self._saved()
                return False
            tmp = self.dir / (FILE + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            _fsync_dir(self.dir)
        except (OSError, TypeError, ValueError) as e:
            self.metrics.saved("error")
            log.error("checkpoint not written", extra={
                "state_dir": str(self.dir), "error": f"{e.__class__.__name__}: {e}"})
            raise CheckpointError(f"cannot write checkpoint in {self.dir}: {e}") from e
        self._last = data
        self.metrics.saved("written", self.clock(), time.perf_counter() - start, len(data))
        self._saved()
        return True

    def _saved(self) -> None:
        if self.pipeline.traces is not None:  # held spans are covered now: they may leave
            self.pipeline.traces.saved()

    def load(self) -> int:
        """Restore every workload of the checkpoint into the pipeline (before the tailers and the
        webhook receiver start); returns how many. No checkpoint: 0. A checkpoint that cannot be
        read raises CheckpointError: starting over silently would count everything again."""
        self._lock()
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            log.info("no checkpoint: starting at the beginning of each log",
                     extra={"state_dir": str(self.dir)})
            return 0
        except OSError as e:
            raise CheckpointError(f"cannot read {self.path}: {e}") from e
        try:
            state = orjson.loads(raw)
            if state.get("v") not in VERSIONS:
                raise ValueError(f"unsupported checkpoint version {state.get('v')!r}")
            registry = self.pipeline.registry
            for w, entry in state["workloads"].items():
                wl = self.pipeline.workload(w)
                wl.restore(entry["log"])
                restore_labels = getattr(wl.obs, "restore_label_state", None)
                if restore_labels is not None and "labels" in entry:
                    restore_labels(entry["labels"])
                if "desired" in entry:  # version 1
                    wl.restore_desired(entry["desired"])
            skipped = restore_metrics(registry, state.get("metrics", {}))
            if self.pipeline.traces is not None and state.get("traces") is not None:
                self.pipeline.traces.restore(state["traces"])
        except (orjson.JSONDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(
                f"checkpoint {self.path} is unreadable ({e}); move it away and choose "
                "--start-from head or earliest") from e
        if state["v"] == 1:
            log.warning("checkpoint of version 1: counters restart at zero once",
                        extra={"state_dir": str(self.dir)})
        if skipped:
            log.warning("metrics whose labels or buckets changed since the checkpoint restart "
                        "at zero once", extra={"state_dir": str(self.dir),
                                               "metrics": ",".join(skipped)})
        self.held_at_save = frozenset(
            w for w, e in state["workloads"].items() if e.get("held"))
        self._last = raw
        n = len(state["workloads"])
        log.info("checkpoint restored", extra={"state_dir": str(self.dir), "workloads": n})
        return n

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _lock(self) -> None:
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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def render_checkpointed(registry: Registry, openmetrics: bool | Format,
                        checkpointer: Checkpointer | None) -> list[bytes]:
    """Save the checkpoint, then render the whole exposition, with no await in between or
    during: the exposition is then exactly the checkpointed state. Raises CheckpointError (the
    scrape must then fail: exposing unsaved counts would count them twice after a crash)."""
    if checkpointer is not None:
        checkpointer.save()
    return list(render(registry, openmetrics))
