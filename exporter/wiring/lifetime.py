"""When a workload that left the route is forgotten: `--workload-retention` after it was first
found missing from the route's workload list.

A workload the route no longer lists has no tailer, so its log is never caught up again and the
idle-unit sweep (wiring/expiry.py), which waits for a caught-up log, never expires its units:
without a limit its units, series and stored rows would stay for the life of the state
directory. A workload missing for longer than the retention is dropped whole (`Pipeline.drop`:
its log, units, open traces, series and rows), with one log line and
`zaroz_exporter_workloads_dropped_total{reason="left_route"}`. One listed again within the
retention goes on where it stopped; one listed again later is new: its log starts at the
beginning of what the route retains, its counters at zero (a new series to Prometheus, held out
of the exposition until caught up, like any workload with no checkpoint).

When it was first found missing is kept with its log (`WorkloadLog.left_at_ns`), so it is part
of the checkpoint and a restart does not restart the retention. Nothing is judged before the
route has listed its workloads once since the start, nor for a route that cannot be listed
(the last list stands), nor without the route (webhooks only: there is no list to leave).

This module reads no clock: the caller passes the wall time of each sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from exporter.wiring.events import Pipeline

log = logging.getLogger(__name__)

REASON = "left_route"


def sweep(pipeline: Pipeline, listed: Collection[str], retention_ns: int, wall_ns: int,
          ) -> list[str]:
    """Mark each workload missing from `listed` (the route's list now, of this shard's
    workloads) since `wall_ns`, clear the mark of those listed again, and drop those missing
    for `retention_ns` or longer (0: never); returns the workloads dropped."""
    expired = []
    for name, wl in pipeline.logs.items():
        if name in listed:
            wl.left(None)
        elif wl.left_at_ns is None:
            wl.left(wall_ns)
        elif retention_ns > 0 and wall_ns - wl.left_at_ns >= retention_ns:
            expired.append((name, wl.left_at_ns, len(wl.units)))
    if not expired:
        return []
    pipeline.drop([name for name, _, _ in expired], REASON)
    for name, since, units in expired:
        log.info("workload dropped: gone from the route's workload list for longer than "
                 "--workload-retention", extra={
                     "workload": name, "gone_seconds": round((wall_ns - since) / 1e9, 3),
                     "retention_seconds": retention_ns / 1e9, "units": units})
    return [name for name, _, _ in expired]
