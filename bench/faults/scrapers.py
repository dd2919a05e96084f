"""Scrapers that poll each exporter the whole run, as two Prometheus replicas would, and note
every counter or histogram sample that went backwards between two of their scrapes, every
count above what the truth implies for the whole log (`checker.bounds`), and every workload a
shard shows that it does not own."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.faults.fleet import Fleet, Slot, rss_mib
from exporter.model.sharding import shard_of

Key = tuple[str, frozenset[tuple[str, str]]]
MONOTONE = ("counter", "histogram")
# The event log's families are restored from the checkpoint, so they hold across restarts; the
# others count what one process did and start again with it (process_start_time_seconds).
DURABLE = ("zaroz_events_", "zaroz_unit_")
START: Key = ("process_start_time_seconds", frozenset())


def workloads_in(samples: dict[Key, float]) -> set[str]:
    return {dict(labels)["workload"] for name, labels in samples
            if name.startswith(("zaroz_events_", "zaroz_unit_")) and "workload" in dict(labels)}


def parse(text: str) -> tuple[dict[Key, float], set[Key]]:
    """All samples, and which of them are counters or histogram parts (never going down)."""
    samples: dict[Key, float] = {}
    monotone: set[Key] = set()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            samples[key] = s.value
            if fam.type in MONOTONE and not s.name.endswith("_created"):
                monotone.add(key)
    return samples, monotone


async def scrape(url: str, session: aiohttp.ClientSession,
                 timeout: float = 10.0) -> dict[Key, float] | None:
    got = await scrape_typed(url, session, timeout)
    return None if got is None else got[0]


async def scrape_typed(url: str, session: aiohttp.ClientSession,
                       timeout: float = 10.0) -> tuple[dict[Key, float], set[Key]] | None:
    try:
        async with session.get(url + "/metrics",
                               timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            if r.status != 200:
                return None
            return parse(await r.text())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


@dataclass
class Backwards:
    at_s: float
    scraper: str
    key: Key
    before: float
    after: float

    def __str__(self) -> str:
        name, labels = self.key
        return (f"t={self.at_s:.2f}s {self.scraper}: {name}{dict(sorted(labels))} "
                f"went from {self.before:g} to {self.after:g}")


@dataclass
class Scraper:
    name: str
    slot: Slot
    fleet: Fleet
    interval_s: float
    t0: float
    ok: int = 0
    failed: int = 0
    rss_max_mib: float = 0.0
    backwards: list[Backwards] = field(default_factory=list)
    bounds: dict[Key, float] = field(default_factory=dict)  # no count above (checker.bounds)
    above: list[str] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)  # workloads shown by a shard not owning them
    _seen: dict[Key, float] = field(default_factory=dict)
    _epoch: int = 0
    _start: float | None = None

    async def run(self) -> None:
        async with aiohttp.ClientSession() as session:
            while True:
                await self.once(session)
                await asyncio.sleep(self.interval_s)

    async def once(self, session: aiohttp.ClientSession) -> None:
        if self.slot.index >= self.fleet.shards:
            return  # not in the fleet now (scaled down)
        epoch = self.fleet.epoch
        pid = self.slot.pid()
        if pid is not None:
            self.rss_max_mib = max(self.rss_max_mib, rss_mib(pid))
        got = await scrape_typed(self.slot.url, session)
        if got is None:
            self.failed += 1
            return
        if epoch != self.fleet.epoch or epoch != self._epoch:
            # Another shard count: workloads moved between shards, so a series may now come
            # from another state dir; begin again.
            self._seen.clear()
            self._epoch = self.fleet.epoch
            if epoch != self.fleet.epoch:
                return
        self.ok += 1
        samples, monotone = got
        start = samples.get(START)
        if start != self._start:
            self._seen = {k: v for k, v in self._seen.items() if k[0].startswith(DURABLE)}
            self._start = start
        at = time.monotonic() - self.t0
        shards, bounds = self.fleet.shards, self.bounds
        for w in workloads_in(samples):
            if shard_of(w, shards) != self.slot.index:
                self.strays.append(f"t={at:.2f}s {self.name}: {w} on shard "
                                   f"{self.slot.index}/{shards}, owned by {shard_of(w, shards)}")
        for key, v in samples.items():
            bound = bounds.get(key)
            if bound is not None and v > bound:
                self.above.append(f"t={at:.2f}s {self.name}: {key[0]}{dict(sorted(key[1]))} "
                                  f"{v:g} > {bound:g}, the whole log's")
        for key in monotone:
            v = samples[key]
            before = self._seen.get(key)
            if before is not None and v < before:
                self.backwards.append(Backwards(at, self.name, key, before, v))
            self._seen[key] = v if before is None else max(before, v)
