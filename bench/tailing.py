"""What tailing a busy fleet costs: requests/s and CPU of the exporter and of the route, for each
`--poll-interval`, side by side in one run.

For each value of `--poll-intervals`: a route process of its own (zaroz_sim.fleet, as in
bench.fleet) and one `zaroz-exporter serve` without a state dir tailing it with that
`--poll-interval`. All pairs run at once, so a slow stretch of the machine hits every value.
Once every exporter has caught up, the live stream starts (`--rate` events/s over the
workloads) and for `--seconds` each exporter is scraped every 2 s while its `/healthz` is timed
every 0.1 s. Printed per value: route responses/s, events per response, CPU of the exporter and
of its route (share of one core, and microseconds per response), scrape median / max, worst and
p99 /healthz. `--baseline DIR` adds a pair whose exporter runs from another checkout (e.g.
`git archive REV | tar -x -C DIR`), without the flag: the code before, in the same run.
`--py-spy DIR` records a profile of each exporter over the window (py-spy must be installed).
Loopback only; every loop is bounded; every process is stopped.

    python -m bench.tailing --workloads 1000 --units 20000 --seconds 20
    python -m bench.tailing --poll-intervals 0,0.5,1,2        # which default
    python -m bench.tailing --baseline /tmp/other-tree         # another checkout beside it
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench._common import child_env, header, table
from bench.fleet import (
    MAIN,
    Exporter,
    Route,
    _die_with_parent,
    metric_sum,
    metrics_text,
    prober,
    scraper,
    wait_ready,
)

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux procfs)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


@dataclass
class Elsewhere(Exporter):
    """A serve process run from another checkout (`root`): its exporter package, not ours."""

    root: Path = Path()

    async def start(self) -> None:
        args = ["serve", "--events-url", self.events_url, "--listen", f"127.0.0.1:{self.port}",
                "--kube", "off", "--log-level", "warning", *self.extra]
        env = {**child_env(), "PYTHONPATH": str(self.root)}
        with open(self.log_path, "ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", MAIN, *args, cwd=self.root, env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=log,
                preexec_fn=_die_with_parent)


@dataclass
class Pair:
    label: str
    route: Route
    exporter: Exporter
    scrapes: list[float] = field(default_factory=list)
    healthz: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)


async def run(args: argparse.Namespace, work: Path) -> list[Pair]:
    pairs: list[Pair] = []
    try:
        if args.baseline:
            route = Route(args.workloads, args.units, args.rate, args.seed)
            pairs.append(Pair("baseline", route, Elsewhere(
                "baseline", route.url, None, work / "serve-baseline.log", [],
                root=Path(args.baseline).resolve())))
        for v in args.poll_intervals:
            route = Route(args.workloads, args.units, args.rate, args.seed)
            extra = [] if v == "none" else [f"--poll-interval={v}"]
            label = "flag absent" if v == "none" else f"--poll-interval {v}"
            pairs.append(Pair(label, route, Exporter(label, route.url, None,
                                                     work / f"serve-{v}.log", extra)))
        async with aiohttp.ClientSession() as session:
            for p in pairs:
                await p.exporter.start()
            syncs = await asyncio.gather(*(wait_ready(session, p.exporter, args.units,
                                                      args.timeout) for p in pairs))
            print("initial sync: " + ", ".join(f"{p.label} {s:.1f} s"
                                               for p, s in zip(pairs, syncs, strict=True)))
            for p in pairs:
                await p.route.ask("live")
            await asyncio.sleep(args.warmup)
            spies = []
            if args.py_spy:
                for p in pairs:
                    out = Path(args.py_spy) / f"tailing-{p.label.split()[-1]}.txt"
                    spies.append(await asyncio.create_subprocess_exec(
                        "py-spy", "record", "-p", str(p.exporter.pid), "-d",
                        str(int(args.seconds)), "-r", "50", "--format", "raw", "-o", str(out),
                        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL))
            before = []
            for p in pairs:
                before.append((await p.route.ask("stats"), cpu_seconds(p.exporter.pid),
                               metric_sum(await metrics_text(session, p.exporter),
                                          "zaroz_route_requests_total") or 0.0))
            t0 = time.perf_counter()
            tasks = []
            for p in pairs:
                tasks.append(scraper(p.exporter, 2.0, args.seconds, p.scrapes, p.errors))
                tasks.append(prober(p.exporter, 0.1, args.seconds, p.healthz, p.errors))
            await asyncio.gather(*tasks)
            secs = time.perf_counter() - t0
            for p, (s0, c0, r0) in zip(pairs, before, strict=True):
                s1 = await p.route.ask("stats")
                c1 = cpu_seconds(p.exporter.pid)
                r1 = metric_sum(await metrics_text(session, p.exporter),
                                "zaroz_route_requests_total") or 0.0
                answered = s1["requests"] - s0["requests"]
                p.figures = {
                    "responses/s": answered / secs,
                    "exporter requests/s": (r1 - r0) / secs,
                    "events/s": (s1["emitted"] - s0["emitted"]) / secs,
                    "exporter cpu": (c1 - c0) / secs,
                    "route cpu": (s1["cpu"] - s0["cpu"]) / secs,
                    "answered": answered,
                    "exporter cpu s": c1 - c0,
                    "route cpu s": s1["cpu"] - s0["cpu"],
                }
            for spy in spies:
                await spy.wait()
    finally:
        for p in pairs:
            await p.exporter.stop(signal.SIGTERM, 30)
            p.route.stop()
    return pairs


def report(pairs: list[Pair]) -> None:
    rows = [["figure", *(p.label for p in pairs)]]

    def row(label: str, fn: object) -> None:
        rows.append([label, *(fn(p) for p in pairs)])  # type: ignore[operator]

    def per(p: Pair, what: str) -> str:
        n = p.figures["answered"]
        return f"{p.figures[what] / n * 1e6:,.0f} us" if n else "-"

    row("route responses / s", lambda p: f"{p.figures['responses/s']:,.0f}")
    row("events / s streamed", lambda p: f"{p.figures['events/s']:,.0f}")
    row("events per response", lambda p: f"{p.figures['events/s'] / p.figures['responses/s']:.1f}"
        if p.figures["responses/s"] else "-")
    row("exporter CPU (of a core)", lambda p: f"{p.figures['exporter cpu']:.0%}")
    row("exporter CPU per response", lambda p: per(p, "exporter cpu s"))
    row("route CPU (of a core)", lambda p: f"{p.figures['route cpu']:.0%}")
    row("route CPU per response", lambda p: per(p, "route cpu s"))
    row("scrape median / max", lambda p: f"{statistics.median(p.scrapes) * 1e3:,.0f} / "
        f"{max(p.scrapes) * 1e3:,.0f} ms" if p.scrapes else "-")
    row("/healthz worst (p99)", lambda p: f"{max(p.healthz) * 1e3:,.0f} "
        f"({sorted(p.healthz)[int(len(p.healthz) * 0.99)] * 1e3:,.0f}) ms" if p.healthz else "-")
    row("failed requests", lambda p: str(len(p.errors)))
    print(table(rows), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tailing",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", type=int, default=1000)
    ap.add_argument("--units", type=int, default=20_000)
    ap.add_argument("--rate", type=float, default=1000.0, help="live events/s (1000)")
    ap.add_argument("--seconds", type=float, default=20.0, help="measured window, s (20)")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--poll-intervals", default="0,2",
                    help="comma-separated --poll-interval values, one exporter each; none: "
                         "without the flag (0,2: none and the default)")
    ap.add_argument("--baseline", default=None, metavar="DIR",
                    help="also run an exporter from this checkout, without the flag")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--py-spy", default=None, metavar="DIR",
                    help="record a py-spy profile (raw, collapsed stacks) of each exporter")
    args = ap.parse_args(argv)
    args.poll_intervals = [x.strip() for x in args.poll_intervals.split(",") if x.strip()]
    if args.py_spy and shutil.which("py-spy") is None:
        ap.error("--py-spy needs py-spy on PATH (pip install py-spy)")
    header(f"tailing: {args.units:,} units over {args.workloads:,} workloads, "
           f"{args.rate:,.0f} events/s, {args.seconds:.0f} s, --poll-interval "
           f"{', '.join(args.poll_intervals)}")
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    work = Path(tempfile.mkdtemp(prefix="zaroz-tailing-"))
    try:
        report(asyncio.run(run(args, work)))
    finally:
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
