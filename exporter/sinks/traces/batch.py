"""A bounded FIFO of span records, exported in batches by one thread: the export path without
a state directory (with one, the outbox is the queue and `sender.Sender` pulls from it).

What the SDK's BatchSpanProcessor does (OTEL_BSP_* knobs: queue size, batch size, schedule
delay), for span records instead of SDK spans, and with what the exporter needs on top: drops
counted where they happen (a full queue refuses the new span), `backpressure` (replay: a full
queue is exported in the caller's thread instead of dropping), and strict order.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from exporter.sinks.traces.builder import SpanRecord

log = logging.getLogger(__name__)


class Batcher:
    def __init__(
        self,
        export: Callable[[list[SpanRecord]], None],
        stats: Any,
        *,
        max_queue_size: int,
        max_batch: int,
        delay_s: float,
        backpressure: bool = False,
    ) -> None:
        self.export = export
        self.max_queue_size = max_queue_size
        self.max_batch = max_batch
        self.delay_s = delay_s
        self.backpressure = backpressure
        self.stats = stats  # its `spans` and `dropped` are written by the putting thread only
        self.queue: deque[SpanRecord] = deque()
        self._lock = threading.Lock()  # one export at a time, in order
        self._wake = threading.Event()
        self._stopping = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="zaroz-traces-export",
                                        daemon=True)
        self._thread.start()

    def put(self, r: SpanRecord) -> None:
        st = self.stats
        st.spans += 1
        q = self.queue
        if self._closed:
            st.dropped += 1
            return
        if len(q) >= self.max_queue_size:
            if self.backpressure and not self._stopping:
                self.flush()
            else:
                st.dropped += 1
                return
        q.append(r)
        if len(q) >= self.max_batch and not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self.delay_s)
            self._wake.clear()
            self._drain()

    def _drain(self) -> None:
        with self._lock:
            q, n = self.queue, self.max_batch
            while q:
                batch = [q.popleft() for _ in range(min(n, len(q)))]
                try:
                    self.export(batch)
                except Exception:  # the export thread must survive an exporter's bug
                    log.exception("span batch export raised")

    def flush(self) -> bool:
        """Export everything queued, in this thread; True when the queue is empty."""
        self._drain()
        return not self.queue

    def shutdown(self, timeout_s: float = 30.0) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout_s)
        self._drain()
        self._closed = True
