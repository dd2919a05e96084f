"""serve's background loops, kept alive: a loop that raises is logged with its exception,
counted in `zaroz_exporter_task_restarts_total{task}` and started again after a backoff.

Why: a task created with `asyncio.create_task` that raises ends silently (its exception is
only logged when the task is collected, if ever), and the loop's work (periodic checkpoints,
idle-unit expiry, the collector's freezes) then stops for good while /healthz stays green.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from exporter.sinks.metrics.family import Registry
from exporter.sources.backoff import Backoff

log = logging.getLogger("exporter.commands.serve")

# A loop that ran this long before it died starts again from the backoff's base: it was
# healthy, and one fault in a day is no reason to wait as after ten in a row.
HEALTHY_S = 300.0


def supervised(name: str, loop: Callable[[], Coroutine[Any, Any, None]], registry: Registry,
               backoff: Backoff, *, monotonic: Callable[[], float] = time.monotonic,
               ) -> Coroutine[Any, Any, None]:
    """`loop()` run again and again until cancelled (a loop that returns is restarted too:
    serve's loops never end on their own)."""
    restarts = registry.counter("zaroz_exporter_task_restarts_total").labels(name)

    async def run() -> None:
        while True:
            started = monotonic()
            try:
                await loop()
                error = "returned"
                exc: BaseException | None = None
            except asyncio.CancelledError:
                raise
            except Exception as e:
                error, exc = f"{e.__class__.__name__}: {e}", e
            if monotonic() - started >= HEALTHY_S:
                backoff.reset()
            delay = backoff.next()
            restarts.inc()
            log.error("background task died; restarting it", exc_info=exc, extra={
                "task": name, "error": error, "restart_in_s": round(delay, 3)})
            await asyncio.sleep(delay)

    return run()
