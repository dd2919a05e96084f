"""Rate-limited logging of failure streaks, shared by the sources' retry loops."""

from __future__ import annotations

import logging
import time
from typing import Any


class Complaints:
    """Logs a failing streak on its first error, on a change of error, then at most every
    `interval` seconds (with the count), and once when it ends: no line per failed request."""

    def __init__(self, logger: logging.Logger, recovered_msg: str, interval: float,
                 **fields: Any) -> None:
        self.log = logger
        self.recovered_msg = recovered_msg
        self.interval = interval
        self.fields = {k: v for k, v in fields.items() if v}
        self.result: str | None = None
        self.count = 0
        self.last_log = 0.0

    def failed(self, level: int, result: str, msg: str, delay: float, **fields: Any) -> None:
        self.count += 1
        now = time.monotonic()
        if result != self.result or now - self.last_log >= self.interval:
            self.log.log(level, msg, extra={**self.fields, "result": result,
                                            "failures": self.count, "retry_in": round(delay, 3),
                                            **fields})
            self.last_log = now
        self.result = result

    def recovered(self, **fields: Any) -> None:
        if self.count:
            self.log.info(self.recovered_msg, extra={**self.fields, "failures": self.count,
                                                     "last_result": self.result, **fields})
        self.result = None
        self.count = 0
