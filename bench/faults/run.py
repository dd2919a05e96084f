"""One run: the platform, the fleet and the scrapers up, the schedule played, every fault
healed, the exporters given a deadline to catch up, then the checks."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench._common import free_port
from bench.faults import checker
from bench.faults import kube as kubecheck
from bench.faults.collector import Collector, unexplained_copies
from bench.faults.fleet import Fleet, Slot
from bench.faults.kube import Cluster
from bench.faults.platform import Release, ScheduledFaults, expected_spans, finite_logs, holes
from bench.faults.schedule import (
    KUBE_KINDS,
    OTLP_KINDS,
    ROUTE_KINDS,
    WEBHOOK_KINDS,
    Fault,
    Kind,
    around,
    draw,
)
from bench.faults.scrapers import Key, Scraper, scrape
from bench.faults.webhooks import Pusher
from exporter.model.sharding import shard_of
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer


@dataclass(frozen=True)
class Options:
    seed: int
    minutes: float
    exporters: int = 2
    workloads: int = 6
    rate: float = 0.4  # unit arrivals a simulated second, per workload
    fault_rate: float = 0.5  # faults a second
    kinds: frozenset[Kind] | None = None
    rss_limit_mib: float = 400.0
    catch_up_s: float = 120.0
    disk_size: str | None = "96m"  # more than the store needs to open (its log: 16 MiB at most)
    root: Path | None = None
    kube: bool = True  # UnitSignals from the Kubernetes API emulator (else --kube off)


@dataclass
class Result:
    seed: int
    seconds: float
    schedule: list[Fault]
    injected: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    route_faults: Counter[str] = field(default_factory=Counter)
    report: checker.Report = field(default_factory=checker.Report)
    failed_at_s: float | None = None
    scrapes: int = 0
    scrapes_failed: int = 0  # down, not ready to answer, or refused (a full disk)
    rss_max_mib: float = 0.0
    events: int = 0
    spans: int = 0
    span_copies: int = 0  # spans received more than once (sent again after a start)
    full_disk_exits: int = 0
    webhooks_acked: int = 0
    webhook_answers: Counter[str] = field(default_factory=Counter)
    kube_writes: Counter[str] = field(default_factory=Counter)
    unitsignals: int = 0  # at the end

    @property
    def ok(self) -> bool:
        return not self.report.failed

    def describe(self) -> str:
        lines = [f"seed {self.seed}: {len(self.schedule)} faults scheduled over "
                 f"{self.seconds:.0f} s, {self.events} events, {self.scrapes} scrapes "
                 f"({self.scrapes_failed} failed), "
                 f"RSS max {self.rss_max_mib:.0f} MiB; {self.spans} spans, "
                 f"{self.span_copies} received again; {self.full_disk_exits} starts refused "
                 f"on a full disk",
                 "  injected: " + ", ".join(f"{k} {n}" for k, n in sorted(self.injected.items())),
                 "  route answers faulted: " + ", ".join(
                     f"{k} {n}" for k, n in sorted(self.route_faults.items())),
                 f"  webhook deliveries acknowledged: {self.webhooks_acked}; answers: " + ", ".join(
                     f"{k} {n}" for k, n in sorted(self.webhook_answers.items())),
                 "  UnitSignal writes: " + ", ".join(
                     f"{k} {n}" for k, n in sorted(self.kube_writes.items()))
                 + f"; {self.unitsignals} UnitSignals at the end",
                 f"  checks held: {self.report.held}, failed: {len(self.report.failed)}"]
        if self.skipped:
            lines.append("  skipped (target already down, no tmpfs, a lost range touching "
                         "another): " + ", ".join(
                f"{k} {n}" for k, n in sorted(self.skipped.items())))
        if self.report.failed:
            lines.append(f"FAILED (replay: python -m bench.faults --seed {self.seed} ...):")
            lines += ["  " + f for f in self.report.failed[:30]]
            at = self.failed_at_s if self.failed_at_s is not None else self.seconds
            lines.append(f"  the schedule around t={at:.1f}s:")
            lines += ["    " + str(f) for f in around(self.schedule, at)]
        return "\n".join(lines)


async def _play(fault: Fault, t0: float, fleet: Fleet, plan: ScheduledFaults,
                collector: Collector, pusher: Pusher, cluster: Cluster | None,
                result: Result) -> None:
    await asyncio.sleep(max(0.0, t0 + fault.at_s - time.monotonic()))
    kind = fault.kind
    if kind in KUBE_KINDS:
        if cluster is None:
            result.skipped[kind] += 1
            return
        await _play_kube(fault, fleet, cluster, result)
        return
    if kind in WEBHOOK_KINDS:
        pusher.switch_on(kind.removeprefix("webhook_"), fault.duration_s)
        result.injected[kind] += 1
        return
    if kind is Kind.WEBHOOK_ROTATE:
        result.injected[kind] += 1
        await pusher.rotate(fault.duration_s)
        return
    if kind in OTLP_KINDS:
        result.injected[kind] += 1
        await collector.window(kind.removeprefix("otlp_").replace("refuse", "refusing"),
                               fault.duration_s)
        return
    if kind is Kind.ROUTE_410_LOSS:
        return  # its range was lost before the run began (platform.holes), counted there
    if kind in ROUTE_KINDS:
        plan.switch_on(kind, fault.duration_s)
        result.injected[kind] += 1
        return
    if kind is Kind.RESHARD:
        done = await fleet.reshard(fault.target)
        (result.injected if done else result.skipped)[kind] += 1
        return
    slot = fleet.slot(fault.target)
    if kind in (Kind.DISK_FULL, Kind.DISK_FULL_KILL):
        if kind is Kind.DISK_FULL_KILL:
            await _scrape_once(slot)  # a save first, so its store's log holds something
        if slot.disk is None or not slot.disk.fill():
            result.skipped[kind] += 1
            return
        result.injected[kind] += 1
        try:
            if kind is Kind.DISK_FULL_KILL:
                await asyncio.sleep(1.0)  # its saves fail on the full disk first
            if kind is Kind.DISK_FULL_KILL:
                await fleet.stop_slot(slot, signal.SIGKILL)  # or already down
                await fleet.restart_slot(slot)  # a start on a full disk
                slot.starting_on_full_disk = True  # no other fault stops it meanwhile
                try:
                    await _started(slot)  # the disk stays full until it opened its state
                finally:
                    slot.starting_on_full_disk = False
            await asyncio.sleep(fault.duration_s)
        finally:
            slot.disk.free()
        return
    sig = signal.SIGKILL if kind is Kind.SIGKILL else signal.SIGTERM
    if not await fleet.stop_slot(slot, sig):
        result.skipped[kind] += 1
        return
    result.injected[kind] += 1
    try:
        await asyncio.sleep(fault.duration_s)
    finally:
        await fleet.restart_slot(slot)


async def _play_kube(fault: Fault, fleet: Fleet, cluster: Cluster, result: Result) -> None:
    kind = fault.kind
    if kind is Kind.KUBE_WATCH_410:
        cluster.expire_watches(fleet.shards)
        result.injected[kind] += 1
        return
    if kind is Kind.KUBE_CRD:
        result.injected[kind] += 1
        await cluster.crd_window(fault.duration_s)
        return
    # UnitSignals of the killed exporter's workloads created, changed and deleted while it is
    # down: its restart must find them as they are, not as its state dir last saw them.
    slot = fleet.slot(fault.target)
    if not await fleet.stop_slot(slot, signal.SIGKILL):
        result.skipped[kind] += 1
        return
    result.injected[kind] += 1
    try:
        mine = [w for w in cluster.workloads if shard_of(w, fleet.shards) == slot.index]
        end = time.monotonic() + fault.duration_s
        while mine and time.monotonic() < end:
            cluster.step(mine)
            await asyncio.sleep(0.1)
    finally:
        await fleet.restart_slot(slot)


async def _write(cluster: Cluster) -> None:
    """The kernel and agents writing UnitSignals the whole run."""
    while True:
        cluster.step()
        await asyncio.sleep(0.3)


async def _scrape_once(slot: Slot) -> None:
    async with aiohttp.ClientSession() as session:
        await scrape(slot.url, session)


async def _started(slot: Slot, timeout_s: float = 30.0) -> None:
    """Until the slot's process answers /healthz or has exited."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline and slot.running():
            try:
                async with session.get(slot.url + "/healthz",
                                       timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.1)


async def _caught_up(fleet: Fleet, heads: dict[str, int], spans: set[str], collector: Collector,
                     cluster: Cluster | None,
                     deadline: float) -> dict[int, dict[Key, float]] | None:
    """Every shard's workloads at their heads and every span received; the last scrapes."""
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            got: dict[int, dict[Key, float]] = {}
            for slot in fleet.active():
                samples = await scrape(slot.url, session)
                if samples is None:
                    break
                got[slot.index] = samples
            else:
                if all(checker._get(got[shard_of(w, fleet.shards)], "zaroz_events_last_seq",
                                    workload=w) == n for w, n in heads.items()) and (
                        spans <= collector.receipts.keys()) and _kube_exact(got, fleet, cluster):
                    return got
            await asyncio.sleep(0.5)
    return None


def _kube_exact(got: dict[int, dict[Key, float]], fleet: Fleet, cluster: Cluster | None) -> bool:
    if cluster is None:
        return True
    report = checker.Report()
    kubecheck.check(report, got, cluster.truth(), fleet.shards)
    return not report.failed


async def _behind(fleet: Fleet, heads: dict[str, int], spans: set[str],
                  collector: Collector, cluster: Cluster | None) -> str:
    """What was still missing at the deadline: each lagging workload, the spans not received,
    the UnitSignals not as the cluster holds them."""
    out = []
    async with aiohttp.ClientSession() as session:
        if cluster is not None:
            got = {slot.index: samples for slot in fleet.active()
                   if (samples := await scrape(slot.url, session)) is not None}
            report = checker.Report()
            kubecheck.check(report, got, cluster.truth(), fleet.shards)
            out += report.failed[:10]
        for w, n in heads.items():
            slot = fleet.slots[shard_of(w, fleet.shards)]
            samples = await scrape(slot.url, session)
            at = "down" if samples is None else checker._get(samples, "zaroz_events_last_seq",
                                                             workload=w)
            if at != n:
                out.append(f"{w} (shard {slot.index}) at {at} of {n}")
    missing = spans - collector.receipts.keys()
    if missing:
        out.append(f"{len(missing)} spans not received")
    return "; ".join(out)


async def run(opts: Options) -> Result:
    seconds = opts.minutes * 60
    sim_seconds = max(60, int(seconds * 2))  # two simulated seconds a wall second
    logs, truth = finite_logs(opts.seed, opts.workloads, sim_seconds, opts.rate)
    schedule = draw(opts.seed, seconds, opts.exporters, rate=opts.fault_rate, kinds=opts.kinds,
                    max_shards=opts.exporters + 1)
    result = Result(opts.seed, seconds, schedule, events=sum(len(v) for v in logs.values()))
    lost, overlapping = holes(schedule, logs, seconds)
    if placed := sum(map(len, lost.values())):
        result.injected[Kind.ROUTE_410_LOSS] = placed
    if overlapping:
        result.skipped[Kind.ROUTE_410_LOSS] = overlapping
    print(f"seed {opts.seed}: {len(schedule)} faults over {seconds:.0f} s, "
          f"{result.events} events in {opts.workloads} workloads, "
          f"{opts.exporters} exporters:", flush=True)
    for f in schedule:
        print("  " + str(f), flush=True)
    with contextlib.ExitStack() as stack:
        root = opts.root or Path(stack.enter_context(tempfile.TemporaryDirectory(
            prefix="zaroz-faults-")))
        spans = expected_spans(logs, lost)
        expect = checker.expectations(truth, logs, lost)  # before the fleet: not on the clock
        collector = Collector(free_port())
        await collector.start()
        plan = ScheduledFaults(opts.seed, lost)
        route = RouteServer(SimConfig(workloads=opts.workloads).workload_list(), faults=plan)
        url = await route.start()
        release = Release(route, logs, lost)
        secret_file = root / "webhook-secrets"
        cluster = Cluster(opts.seed, list(logs)) if opts.kube else None
        kube_url = await cluster.start() if cluster is not None else None
        tasks: list[asyncio.Task[None]] = []
        fleet = Fleet(root, url, opts.exporters + 1, opts.exporters, disk_size=opts.disk_size,
                      extra=("--otlp-endpoint", collector.endpoint,
                             "--webhook-secret-file", str(secret_file)),
                      env={"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_EXPORTER_OTLP_TIMEOUT": "1"},
                      kube_url=kube_url)
        pusher = Pusher(fleet, logs, release, secret_file, opts.seed)
        if cluster is not None:
            tasks.append(asyncio.create_task(_write(cluster)))
        scrapers: list[Scraper] = []
        try:
            await fleet.start()
            for slot in fleet.active():  # the schedule begins once the fleet is up
                await _started(slot)
            t0 = time.monotonic()
            limits = checker.bounds(expect)
            for slot in fleet.slots:
                for name, every in (("a", 0.5), ("b", 0.7)):
                    sc = Scraper(f"scraper-{name}@{slot.index}", slot, fleet, every, t0,
                                 bounds=limits)
                    scrapers.append(sc)
                    tasks.append(asyncio.create_task(sc.run()))
            tasks.append(asyncio.create_task(pusher.run()))
            plays = [asyncio.create_task(_play(f, t0, fleet, plan, collector, pusher, cluster,
                                                   result))
                     for f in schedule]
            while (elapsed := time.monotonic() - t0) < seconds:
                release.to(elapsed / (seconds * 0.85))
                await asyncio.sleep(0.2)
            release.to(1.0)
            # Heal: no new faults, the running ones ended, every exporter up.
            plan.heal()
            pusher.heal()
            for p in plays:
                p.cancel()
            await asyncio.gather(*plays, return_exceptions=True)
            if cluster is not None:
                cluster.heal()
                tasks[0].cancel()  # the writer: the truth is final from here
            await fleet.heal()
            print(f"healed at t={time.monotonic() - t0:.1f}s; catching up", flush=True)
            heads = {w: len(evs) for w, evs in logs.items()}
            final = await _caught_up(fleet, heads, spans, collector, cluster,
                                     time.monotonic() + opts.catch_up_s)
            report = result.report
            report.check(final is not None,
                         f"the exporters did not catch up within {opts.catch_up_s:.0f} s: "
                         f"{await _behind(fleet, heads, spans, collector, cluster)}")
            if final is not None:
                checker.ownership(report, final, list(logs), fleet.shards)
                for w in logs:
                    checker.truth(report, final[shard_of(w, fleet.shards)], expect[w])
                if cluster is not None:
                    want = cluster.truth()
                    kubecheck.check(report, final, want, fleet.shards)
                    result.unitsignals = len(want)
                    result.kube_writes = cluster.writes
            got = collector.receipts
            missing, foreign = spans - got.keys(), got.keys() - spans
            report.check(not missing, f"{len(missing)} of {len(spans)} spans never received")
            report.check(not foreign, f"{len(foreign)} spans received that the logs do not make")
            result.spans = len(spans)
            result.span_copies = sum(map(len, got.values())) - len(got)
            unexplained = unexplained_copies(
                collector.receipts, {n: (s.epoch, s.end) for n, s in fleet.starts.items()})
            report.check(not unexplained, f"{len(unexplained)} span copies no fault explains, "
                         f"first: {unexplained[:3]}")
            for sc in scrapers:
                report.check(not sc.backwards, f"{len(sc.backwards)} samples went backwards "
                             f"for {sc.name}, first: {sc.backwards[0] if sc.backwards else ''}")
                if sc.backwards and result.failed_at_s is None:
                    result.failed_at_s = sc.backwards[0].at_s
                report.check(not sc.above, f"{len(sc.above)} counts above the truth's for "
                             f"{sc.name}, first: {sc.above[:1]}")
                report.check(not sc.strays, f"{len(sc.strays)} workloads on a shard not owning "
                             f"them for {sc.name}, first: {sc.strays[:1]}")
                result.scrapes += sc.ok
                result.scrapes_failed += sc.failed
                result.rss_max_mib = max(result.rss_max_mib, sc.rss_max_mib)
            report.check(result.rss_max_mib <= opts.rss_limit_mib,
                         f"RSS {result.rss_max_mib:.0f} MiB over {opts.rss_limit_mib:.0f} MiB")
            report.check(not fleet.exits, f"exporters exited on their own: {dict(fleet.exits)}")
            result.route_faults = plan.injected
            result.full_disk_exits = fleet.full_disk_exits
            result.webhooks_acked = pusher.acked
            result.webhook_answers = pusher.answers
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await fleet.close()
            await route.stop()
            await collector.stop()
            if cluster is not None:
                await cluster.stop()
    return result
