"""`--start-from`: where each workload's log starts, decided by the command before any source
starts (the checkpoint only stores and restores; the route only answers)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from exporter.sources.route import CursorExpired, RouteClient
from exporter.wiring.state.checkpoint import Checkpointer

START_FROM = ("checkpoint", "head", "earliest")


async def route_head(client: RouteClient, workload: str) -> int:
    """The route's head_seq for a workload, from one `wait=0, limit=1` page."""
    try:
        page = await client.events(workload, 0, 1, 0)
    except CursorExpired as e:
        page = await client.events(workload, e.oldest_seq - 1, 1, 0)
    return page.head_seq


def prepare_start(
    start_from: str,
    checkpointer: Checkpointer | None,
    client: RouteClient | None,
) -> Callable[[str], Awaitable[int]] | None:
    """Apply --start-from before the tailers start; returns the supervisor's `start_cursor`.

    checkpoint: restore the checkpoint when there is one (each workload then resumes at its
      cursor; workloads not in it start at the beginning of their log);
    head: ignore any checkpoint; every workload known at the first discovery starts at the
      route's current head_seq (later workloads are new and start at the beginning);
    earliest: ignore any checkpoint; start every log at its beginning.
    With head or earliest the store is replaced at the first save, which a damaged store may
    refuse: it ends the start as it does with checkpoint (Checkpointer.verify).
    """
    if start_from not in START_FROM:
        raise ValueError(f"--start-from must be one of {', '.join(START_FROM)}")
    if start_from == "checkpoint":
        if checkpointer is not None:
            checkpointer.load()
        return None
    if checkpointer is not None:
        checkpointer.verify()
    if start_from == "head":
        if client is None:
            raise ValueError("--start-from head needs the events route (--events-url)")
        return functools.partial(route_head, client)
    return None
