"""The periodic checkpoint: due an interval after the last save of any kind, so that a scrape's
own commit holds at most an interval's changes; after failed saves it backs off."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import pytest

from exporter.commands.serve import _checkpoint_loop
from exporter.sources.backoff import Backoff


@dataclass
class _Commits:
    last_taken: float = 0.0


@dataclass
class _Running:
    """What the loop reads of `Running`: its group commit's last save, and `save_async`."""

    clock: list[float]
    outcomes: list[bool]  # each periodic save's outcome, in turn
    commits: _Commits = field(default_factory=_Commits)
    saves: list[float] = field(default_factory=list)  # when each periodic save was taken
    scrapes: dict[int, float] = field(default_factory=dict)  # sleep n: a scrape saved this
    # many seconds before it ended

    async def save_async(self) -> bool:
        self.saves.append(self.clock[0])
        self.commits.last_taken = self.clock[0]
        return self.outcomes[len(self.saves) - 1]


def _run(running: _Running, interval: float, saves: int) -> list[float]:
    """Run the loop on a fake clock until `saves` periodic saves were taken; the delays it
    slept for."""
    delays: list[float] = []

    async def sleep(s: float) -> None:
        delays.append(s)
        running.clock[0] += s
        before = running.scrapes.get(len(delays))
        if before is not None:  # a scrape saved during this sleep, `before` s before its end
            running.commits.last_taken = running.clock[0] - before
        if len(running.saves) >= saves:
            raise asyncio.CancelledError

    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await _checkpoint_loop(running, interval,  # type: ignore[arg-type]
                                   sleep=sleep, clock=lambda: running.clock[0],
                                   backoff=Backoff(interval, 30.0, rng=random.Random(5)))

    asyncio.run(main())
    return delays


def test_the_periodic_save_is_due_an_interval_after_any_save() -> None:
    running = _Running(clock=[0.0], outcomes=[True] * 4, scrapes={2: 0.15})
    _run(running, 0.25, 4)
    # 0.25 the first; a scrape's save at 0.35 puts the next at 0.60, not 0.50; then every 0.25
    assert running.saves == pytest.approx([0.25, 0.60, 0.85, 1.10])


def test_failed_saves_back_off_and_a_success_resets_the_pace() -> None:
    # a scrape's save just before the third sleep ends: the loop, backing off, still retries
    # then (a scrape's save does not postpone a retry after a failure)
    running = _Running(clock=[0.0], outcomes=[False] * 6 + [True, True], scrapes={3: 0.01})
    delays = _run(running, 0.25, 8)
    assert running.saves[2] == pytest.approx(sum(delays[:3]))
    gaps = [b - a for a, b in zip(running.saves, running.saves[1:], strict=False)]
    assert all(g >= 0.25 - 1e-9 for g in gaps)
    assert sum(gaps[:6]) > 6 * 0.25 * 2  # backing off: far longer than the interval each
    assert gaps[6] == pytest.approx(0.25)  # after the success, the interval again
