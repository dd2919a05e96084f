"""Stopping the sources' background tasks."""

from __future__ import annotations

import asyncio
import contextlib


async def cancel(*tasks: asyncio.Task[None] | None) -> None:
    """Cancel the tasks and wait for each to end; their cancellation is not an error."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    for t in live:
        with contextlib.suppress(asyncio.CancelledError):
            await t
