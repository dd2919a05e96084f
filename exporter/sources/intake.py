"""One ordered intake per workload: webhook deliveries and the route tailer feed the same
WorkloadLog (platform.md 2b, measurements.md "Applying a workload's events").

The WorkloadLog already reorders and deduplicates by seq, so both sources can offer the same
event any number of times in any order. What this module adds is every decision that needs a
clock, which the pure model must not read:

- events waiting behind a gap (log.pending) for longer than `grace` make the workload's tailer
  fetch at once (a backfill from the route). If the route does not have the missing seqs either,
  the tailer's page skips them and the tailer gives them up, as for any page;
- a `webhook.ping` whose seq (the webhook's cursor) is ahead of what was applied triggers the same
  backfill: deliveries were missed;
- without a tailer (webhooks only), a gap open for `give_up_after` seconds is given up, or the
  events behind it would wait forever.

Deliveries for a workload nobody tails yet: in discovery mode they start its tailer at once (the
delivery is signed, so the platform vouches for the workload); with a fixed --workload list they
are acknowledged and ignored (the operator chose what this exporter measures, e.g. one shard of
the workloads); with no route at all they are applied (webhooks are then the only source).
Under sharding, a workload another shard owns is acknowledged and ignored the same way: its shard
reads it from the route (or from its own webhook URL).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from exporter.model.workload import WorkloadLog
from exporter.sources.ports import WebhookRecorder, WorkloadLogs
from exporter.sources.tailer import TailSupervisor

log = logging.getLogger(__name__)


class Intake:
    def __init__(
        self,
        pipeline: WorkloadLogs,
        metrics: WebhookRecorder,
        supervisor: TailSupervisor | None = None,
        *,
        grace: float = 2.0,
        give_up_after: float = 60.0,
        min_backfill_interval: float = 0.5,
        max_workloads: int = 10_000,
        max_ids: int = 100_000,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pipeline = pipeline
        self.metrics = metrics
        self.supervisor = supervisor
        self.grace = grace
        self.give_up_after = give_up_after
        self.min_backfill_interval = min_backfill_interval
        # The workload header is not covered by the signature: a captured delivery replayed
        # within the tolerance under made-up workload names must not grow series without bound.
        self.max_workloads = max_workloads
        self.clock = clock
        self.monotonic = monotonic
        self.max_ids = max_ids
        self._ids: dict[str, str] = {}  # recent event ids -> the workload they came under
        self._deferred: dict[str, asyncio.TimerHandle] = {}  # backfills held to the interval
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._gap_since: dict[str, tuple[int, float]] = {}  # workload -> (first missing, since)
        self._last_backfill: dict[str, float] = {}

    # -- deliveries ----------------------------------------------------------------------------

    def deliver(self, workload: str, obj: Any) -> str:
        """Apply one authenticated delivery (decoded JSON); returns its result label."""
        if self._replayed_elsewhere(workload, obj):
            return "cross_workload"
        wl = self._log_for(workload)
        if wl is None:
            return "ignored"
        self.metrics.delivered(workload, self.clock())
        seq = obj.get("seq") if type(obj) is dict else None
        if type(seq) is not int:
            wl.offer(obj, "webhook")  # the model counts it invalid
            return "invalid"
        result = wl.offer(obj, "webhook")
        if result == "ping":
            self.metrics.cursor(workload, seq)
            if seq > wl.cursor("route"):  # a ping beyond the model's seqs too
                self._backfill(workload, "ping")
            return result
        if wl.pending:
            self._watch(workload, wl)
        return result

    def _replayed_elsewhere(self, workload: str, obj: Any) -> bool:
        """True when the event's id was already delivered under another workload.

        The signature does not cover the Zaroz-Workload header, so a captured delivery could be
        replayed (within the timestamp tolerance) under another workload's name. Event ids are
        unique platform-wide, so an id seen with another workload is such a replay. A bounded
        map of recent ids (insertion order, oldest dropped) covers the tolerance window.
        """
        eid = obj.get("id") if type(obj) is dict else None
        if type(eid) is not str:
            return False
        ids = self._ids
        first = ids.get(eid)
        if first is None:
            ids[eid] = workload
            if len(ids) > self.max_ids:
                del ids[next(iter(ids))]
            return False
        return first != workload  # the receiver counts and logs the refusal (rate-limited)

    def _log_for(self, workload: str) -> WorkloadLog | None:
        wl = self.pipeline.logs.get(workload)
        if wl is not None:
            return wl
        if len(self.pipeline.logs) >= self.max_workloads:
            return None
        sup = self.supervisor
        if sup is None:
            return self.pipeline.workload(workload)
        if sup.fixed is not None:
            ok = workload in sup.fixed and sup.owns(workload)
            return self.pipeline.workload(workload) if ok else None
        # Another shard's workload (model/sharding.py) is not started here: its shard reads it.
        return self.pipeline.workload(workload) if sup.add(workload) else None

    # -- gaps and backfills --------------------------------------------------------------------

    def _watch(self, workload: str, wl: WorkloadLog) -> None:
        """Check the workload again after the grace, unless a check is already due."""
        first_missing = wl.applied_through + 1
        since = self._gap_since.get(workload)
        if since is None or since[0] != first_missing:
            self._gap_since[workload] = (first_missing, self.monotonic())
        if workload not in self._timers:
            loop = asyncio.get_running_loop()
            self._timers[workload] = loop.call_later(self.grace, self._due, workload)

    def _due(self, workload: str) -> None:
        self._timers.pop(workload, None)
        wl = self.pipeline.logs.get(workload)
        since = self._gap_since.get(workload)
        if wl is None or not wl.pending or since is None:
            self._gap_since.pop(workload, None)
            return
        first_missing, t0 = since
        if wl.applied_through >= first_missing:
            # That gap closed; a later one is open: give it its own grace.
            self._gap_since.pop(workload, None)
            self._watch(workload, wl)
            return
        waited = self.monotonic() - t0
        tailer = self.supervisor.tailers.get(workload) if self.supervisor is not None else None
        if tailer is None and waited >= self.give_up_after:
            through = min(wl.pending) - 1
            log.warning("webhook gap given up: no route to fetch it from", extra={
                "workload": workload, "first_seq": first_missing, "last_seq": through})
            wl.give_up(through)
            self._gap_since.pop(workload, None)
        else:
            self._backfill(workload, "gap")
        if wl.pending:
            self._watch(workload, wl)

    def _backfill(self, workload: str, reason: str) -> None:
        """Ask the workload's tailer to fetch now. Inside `min_backfill_interval` of the last
        backfill the request is coalesced into one that runs when the interval ends, so a ping
        is never dropped (its events would otherwise wait up to a whole long poll)."""
        sup = self.supervisor
        tailer = sup.tailers.get(workload) if sup is not None else None
        if tailer is None:
            return
        now = self.monotonic()
        wait = self._last_backfill.get(workload, -1e18) + self.min_backfill_interval - now
        if wait > 0:
            if workload not in self._deferred:
                loop = asyncio.get_running_loop()
                self._deferred[workload] = loop.call_later(
                    wait, self._deferred_backfill, workload, reason)
            return
        self._last_backfill[workload] = now
        self.metrics.backfill(workload, reason)
        log.debug("backfilling from the route", extra={
            "workload": workload, "reason": reason, "cursor": tailer.cursor})
        tailer.fetch_now()

    def _deferred_backfill(self, workload: str, reason: str) -> None:
        self._deferred.pop(workload, None)
        self._backfill(workload, reason)

    # -- as a Source (sources.ports) ------------------------------------------------------------

    async def start(self) -> None:
        """Nothing runs ahead of the first delivery: the receiver's route is already installed."""

    async def stop(self) -> None:
        self.close()

    def readiness(self) -> tuple[bool, str]:
        """Deliveries are taken from the first moment: nothing to catch up with."""
        return True, "webhook deliveries accepted"

    def forget(self, workloads: Iterable[str]) -> None:
        """Workloads dropped (wiring/lifetime.py): their gap checks and backfills are
        cancelled and their marks go, so neither lingers nor judges a log made again under
        the name by the old one's times."""
        for w in workloads:
            for timers in (self._timers, self._deferred):
                h = timers.pop(w, None)
                if h is not None:
                    h.cancel()
            self._gap_since.pop(w, None)
            self._last_backfill.pop(w, None)

    def close(self) -> None:
        """Cancel the pending checks (at shutdown)."""
        for h in (*self._timers.values(), *self._deferred.values()):
            h.cancel()
        self._timers.clear()
        self._deferred.clear()
