"""The OTLP exporter's own log, turned into one rate-limited warning.

With the collector unreachable, the SDK's OTLP exporter logs a ~300-character warning per retry
(every 1-5 s) and an error per batch. Every failure is already counted
(`zaroz_traces_export_failures_total`), so the log only needs to say that export is failing, to
where, and why: one warning with the endpoint and the shortest form of the error, then at most
one every `interval` seconds with how many messages were held back, and one info line when
export works again.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

log = logging.getLogger("exporter.traces")

# Loggers the OTLP exporters (and their HTTP client) write retries and failures to.
EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
)
_ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")\]]+")
MAX_ERROR_CHARS = 160
# What the exporter says when our shutdown interrupts it: no failure of the collector.
_SHUTTING_DOWN = ("Shutdown in progress", "Exporter already shutdown", "OTLP client already")


def short_error(text: str) -> str:
    """`[Errno 111] Connection refused` out of a requests/urllib3 chain, else the text cut."""
    m = _ERRNO.search(text)
    if m:
        return m.group(0).strip()
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


class ExportLog(logging.Filter):
    """Attached to the exporter loggers: drops their records and warns for them, rate-limited."""

    def __init__(self, endpoint: str, interval: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.interval = interval
        self.clock = clock
        self.held = 0  # messages held back since the last warning
        self.failing = False
        self._last: float | None = None
        self._lock = threading.Lock()  # the export thread and the shutdown path both log

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if record.levelno >= logging.WARNING and not msg.startswith(_SHUTTING_DOWN):
            self.failure(short_error(msg))
        return False

    def failure(self, error: str) -> None:
        with self._lock:
            now = self.clock()
            self.failing = True
            if self._last is not None and now - self._last < self.interval:
                self.held += 1
                return
            held, self.held, self._last = self.held, 0, now
        log.warning("OTLP trace export failing", extra={
            "endpoint": self.endpoint, "error": error, "held_back": held})

    def success(self) -> None:
        if self.failing:
            with self._lock:
                self.failing, self._last, held, self.held = False, None, self.held, 0
            log.info("OTLP trace export works again",
                     extra={"endpoint": self.endpoint, "held_back": held})

    def install(self) -> None:
        for name in EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def remove(self) -> None:
        for name in EXPORTER_LOGGERS:
            logging.getLogger(name).removeFilter(self)
