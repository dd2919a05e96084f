"""Waiting in async tests for something other tasks bring about."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(pred: Callable[[], object], timeout: float = 5.0, interval: float = 0.005) -> None:
    """Return once `pred()` holds; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)
