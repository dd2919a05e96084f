"""Background tasks: stopping them, and keeping the long-lived ones alive."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from exporter.sources.backoff import Backoff

log = logging.getLogger("exporter.tasks")

# A loop that ran this long before it died starts again from the backoff's base: it was
# healthy, and one fault in a day is no reason to wait as after ten in a row.
HEALTHY_S = 300.0


async def cancel(*tasks: asyncio.Task[None] | None) -> None:
    """Cancel the tasks and wait for each to end; their cancellation is not an error."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    for t in live:
        with contextlib.suppress(asyncio.CancelledError):
            await t


async def supervised(name: str, loop: Callable[[], Coroutine[Any, Any, None]],
                     died: Callable[[], None], backoff: Backoff, *,
                     monotonic: Callable[[], float] = time.monotonic) -> None:
    """`loop()` run again and again until cancelled: one that raises (or returns: the loops
    this keeps never end on their own) is logged with its exception, told to `died` (serve
    counts it in zaroz_exporter_task_restarts_total{task}) and started again after a backoff.

    Why: a task made by `asyncio.create_task` that raises ends silently (its exception is
    logged only when the task is collected, if ever), and its work (periodic checkpoints,
    idle-unit expiry, the collector's freezes, the overview's history) stops for good while
    /healthz stays green."""
    while True:
        started = monotonic()
        exc: BaseException | None = None
        try:
            await loop()
            error = "returned"
        except asyncio.CancelledError:
            raise
        except Exception as e:
            error, exc = f"{e.__class__.__name__}: {e}", e
        if monotonic() - started >= HEALTHY_S:
            backoff.reset()
        delay = backoff.next()
        died()
        log.error("background task died; restarting it", exc_info=exc, extra={
            "task": name, "error": error, "restart_in_s": round(delay, 3)})
        await asyncio.sleep(delay)
