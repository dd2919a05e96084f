"""The export thread with a checkpoint: pulls batches from the outbox and retries each until the
collector accepts it.

A batch the collector does not accept (unreachable, refusing, timing out, after the OTLP
exporter's own retries) is tried again after a backoff (1 s, doubling to 10 s) for as long as it
takes: an outage delays spans, it never loses them. Each failed attempt is counted
(`zaroz_traces_export_failures_total`) and the OTLP exporter's warnings are logged, rate-limited
(`exportlog.ExportLog`). One batch is in flight at a time, in serial order: that is what lets
the outbox's mark move only over accepted spans.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from exporter.sinks.traces.builder import SpanRecord
from exporter.sinks.traces.outbox import Outbox

log = logging.getLogger("exporter.traces")

BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 10.0
_IDLE_WAIT_S = 1.0  # how long `take` waits for spans before looking at the flags again


class Sender:
    def __init__(self, outbox: Outbox, export: Callable[[list[SpanRecord]], bool],
                 max_batch: int, *, backoff_min: float = BACKOFF_MIN_S,
                 backoff_max: float = BACKOFF_MAX_S) -> None:
        self.outbox = outbox
        self.export = export  # True when the collector accepted the batch
        self.max_batch = max_batch
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self._draining = False  # shutdown: export what waits, then stop
        self._stop = threading.Event()  # stop now: what waits stays in the checkpoint
        self._thread = threading.Thread(target=self._run, name="zaroz-traces-export",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """`_pull`, supervised: a bug in it is logged and the loop starts again (what waits is
        still in the outbox), instead of leaving every later span waiting forever."""
        while True:
            try:
                self._pull()
                return
            except Exception:
                log.exception("span export thread failed; starting it again")
                if self._stop.wait(self.backoff_min):
                    return

    def _pull(self) -> None:
        box = self.outbox
        while not self._stop.is_set():
            batch = box.take(self.max_batch, _IDLE_WAIT_S)
            if not batch:
                if self._draining:
                    return
                continue
            records = [r for _, r in batch]
            delay = self.backoff_min
            while not self._export(records):
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, self.backoff_max)
            delay = self.backoff_min
            while not self._accepted(batch):  # the mark cannot be written (a full disk)
                if self._stop.wait(delay):
                    return  # the batch is sent again at the next start (counted as re-sent)
                delay = min(delay * 2, self.backoff_max)

    def _accepted(self, batch: list[tuple[int, SpanRecord]]) -> bool:
        try:
            self.outbox.accepted(batch)
        except OSError as e:
            log.error("export mark not written; retrying (the batch stays until it is)", extra={
                "error": f"{e.__class__.__name__}: {e}", "serial": batch[-1][0]})
            return False
        return True

    def _export(self, records: list[SpanRecord]) -> bool:
        try:
            return self.export(records)
        except Exception:  # the export thread must survive an exporter's bug; retried
            log.exception("span batch export raised")
            return False

    def drain(self, timeout: float | None) -> bool:
        """Export what waits, then stop; True when everything was accepted in time."""
        self._draining = True
        self.outbox.wake()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self) -> None:
        """Stop at once (after the current attempt); what waits stays in the checkpoint."""
        self._draining = True
        self._stop.set()
        self.outbox.wake()

    def alive(self) -> bool:
        return self._thread.is_alive()
