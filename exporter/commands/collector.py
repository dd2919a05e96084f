"""Python's cyclic garbage collector kept off the fleet.

A full collection walks every container the process tracks. At 100k live units (and more with
the UnitSignal model) that is ~50-160 ms with the event loop held (measured with gc.callbacks
on `serve` fed 1,000 events/s: one every ~4 s, since each page's decoded events are promoted to
the oldest generation while they are applied and count towards its next collection). What lives
that long is the fleet's state, which holds no reference cycles worth looking for, so it is
moved out of the collector's sight (`gc.freeze`) once loaded, and again at each `step`:

- the first freeze, once every source is ready (caught up, synced), collects only the young
  generations first (a full collection then would be the very stall this avoids): cyclic
  garbage already in the oldest generation stays frozen, once;
- each later step collects fully, which walks only what was not frozen (what survived since the
  last step: in proportion to what changed), then freezes the survivors.

Frozen objects are still freed by reference counting as usual; only a cycle that was alive at
a freeze and became garbage later is never collected. Measured: a completed route request
leaves no cyclic garbage, one cancelled mid-flight ~7 objects; so a step leaks at most what the
requests in flight then leave if they fail (1,000 workloads: ~7,000 small objects), which is
why steps are minutes apart.

The youngest generation's threshold is raised from 700 to 10,000 allocations: each decoded page
of events otherwise lives through several young collections and is promoted, which is what
made full collections come every few seconds (serve at 1,000 workloads, 1,000 events/s, after
the freeze: 826 young, 75 middle and 6 full collections in ~40 s, 1.5 s of CPU; with 10,000: 7
to 11 young collections, 0.22-0.29 s). The longest single collection stays ~50-70 ms either
way at 1,000 workloads: what is walked then is the ~90k objects of the 1,000 route requests in
flight (a full collection at 700; a young one at 10,000, whose generation also holds them, as
frees of frozen objects keep its count low).
"""

from __future__ import annotations

import gc

STEP_S = 120.0  # seconds between steps (serve's loop)
THRESHOLD0 = 10_000


def tune() -> None:
    """The young generation's threshold (see the module docstring); the others unchanged."""
    _, t1, t2 = gc.get_threshold()
    gc.set_threshold(THRESHOLD0, t1, t2)


class Collector:
    """Freezes the long-lived heap; `step` is called by serve's loop every STEP_S."""

    def __init__(self) -> None:
        self.frozen = False  # the first freeze was made

    def step(self, ready: bool) -> bool:
        """Collect what is not frozen yet and freeze the survivors; True when it froze. Waits
        for `ready`: a backlog being applied is still allocating what will live."""
        if not ready:
            return False
        if self.frozen:
            gc.collect()
        else:
            gc.collect(1)
            self.frozen = True
        gc.freeze()
        return True
