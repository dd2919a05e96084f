"""When idle units are dropped: by each workload's event clock, and by the wall clock only for a
log that is caught up and has been idle.

The model forgets a unit whose last event is more than the idle timeout before `now`. Using the
wall clock as `now` is wrong while a log is caught up on: an exporter reading a backlog older
than the timeout (after an outage, or a first start on a retained log) would drop units it is
about to see again, and lose their drains and startups. So `now` is the workload's event clock
(the latest occurred_at applied), which a backlog of any age moves only as far as its own events
go. A caught-up log that receives nothing has a clock that stops, though, and its units would
never expire: for such a log the wall time it has been idle is added to its event clock.

This module reads no clock itself: the caller passes the wall time of each sweep.

A sweep reads every unit's last event time (parsed: ~0.5 µs a unit, 50-70 ms at 100k units held
on one core), so serve runs it in slices of SLICE units with the loop run between them
(`sweep_steps`): each workload's `now` is fixed at its first slice, and each unit is judged
on its state when its slice comes (one touched meanwhile is not idle; one created meanwhile
waits for the next sweep). A sweep over an unchanging model expires exactly what `sweep` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from exporter.wiring.events import Pipeline

SLICE = 5_000  # units judged between two turns of the loop (~3 ms)


class ExpiryClock:
    """Remembers, per workload, since when (wall time) its log has been caught up and still."""

    def __init__(self) -> None:
        # name -> ((applied_through, idle), since when)
        self._moved: dict[str, tuple[tuple[int, bool], int]] = {}

    def now_ns(self, name: str, applied_through: int, pending: int, event_clock_ns: int,
               caught_up: bool, wall_ns: int) -> int:
        """The `now` to expire the workload's units at, at wall time `wall_ns`."""
        # Idle time starts at the first sweep that finds the log caught up with nothing
        # waiting, and starts again at every sweep that does not, or finds it moved.
        mark = (applied_through, caught_up and not pending)
        seen = self._moved.get(name)
        if seen is None or not mark[1] or seen[0] != mark:
            self._moved[name] = seen = (mark, wall_ns)
        if event_clock_ns == 0:
            return 0
        return event_clock_ns + max(0, wall_ns - seen[1])

    def sweep(self, pipeline: Pipeline, caught_up: Callable[[str], bool], wall_ns: int) -> None:
        """Expire every workload's idle units, in one go."""
        for name, wl in list(pipeline.logs.items()):
            now = self.now_ns(name, wl.applied_through, len(wl.pending), wl.clock,
                              caught_up(name), wall_ns)
            if now:
                pipeline.expire_workload(name, now)
        self._forget(pipeline)

    def sweep_steps(self, pipeline: Pipeline, caught_up: Callable[[str], bool], wall_ns: int,
                    slice_units: int = SLICE) -> Iterator[None]:
        """`sweep` in slices: yields after about every `slice_units` units judged (serve runs
        the loop there, every minute or so)."""
        budget = slice_units
        for name, wl in list(pipeline.logs.items()):
            if pipeline.logs.get(name) is not wl:
                continue  # gone since the sweep began
            now = self.now_ns(name, wl.applied_through, len(wl.pending), wl.clock,
                              caught_up(name), wall_ns)
            if not now:
                continue
            uids, i = list(wl.units), 0
            while i < len(uids):
                n = min(budget, len(uids) - i)
                wl.expire(now, uids[i:i + n])
                i += n
                budget -= n
                if budget == 0:
                    budget = slice_units
                    yield
            pipeline.expire_traces(name, now)
        self._forget(pipeline)

    def _forget(self, pipeline: Pipeline) -> None:
        for name in [n for n in self._moved if n not in pipeline.logs]:
            del self._moved[name]
