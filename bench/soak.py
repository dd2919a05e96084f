"""Memory soak with traces on: does a `serve` exporting traces with `--state-dir` stay flat?

One live simulated route (`python -m zaroz_sim`, `--time-scale` times real time, a steady stream)
and one OTLP/HTTP receiver (`python -m tests.otlp_receiver`, counting), each in its own process,
and four `zaroz-exporter serve` processes tailing the same route at the same time:
- no traces;
- no traces, `--state-dir` (the store's own memory: LevelDB's memtable and caches);
- traces, no state directory (spans leave through the export queue);
- traces and `--state-dir` (spans wait in the outbox until a checkpoint covers them and the
  receiver accepts them).
Each is scraped every `--scrape-interval` s (a scrape also saves the checkpoint) and its RSS
sampled every second. Printed per exporter: RSS after the warm-up and at the end, the RSS slope
after the warm-up (least squares, MiB/min), and for the traced ones the spans exported and still
waiting (`zaroz_traces_spans_waiting`). Target: the traced slopes equal the untraced one.

    python -m bench.soak                      # 180 s, 60 s of warm-up
    python -m bench.soak --seconds 120 --warmup 40
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench._common import ROOT, child_env, free_port, header, proc_status_kib, table
from tests.simlogs import parse, value

MAIN = "import sys; from exporter.cli import main; sys.exit(main())"


def _die_with_parent() -> None:
    """SIGKILL the child when the bench dies (Linux PR_SET_PDEATHSIG): nothing outlives it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


async def _child(*args: str, stdout: int | None = None,
                 stdin: int | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, *args, cwd=ROOT, env=child_env(), stdout=stdout, stdin=stdin,
        stderr=asyncio.subprocess.DEVNULL, preexec_fn=_die_with_parent)


async def _first_line(proc: asyncio.subprocess.Process, what: str) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    if not line:
        raise RuntimeError(f"{what} did not start")
    return line.decode().strip()


@dataclass
class Exporter:
    name: str
    extra: list[str]
    port: int = field(default_factory=free_port)
    proc: asyncio.subprocess.Process | None = None
    rss: list[tuple[float, int]] = field(default_factory=list)  # (seconds, KiB)
    last: dict[Any, float] = field(default_factory=dict)

    async def start(self, route: str) -> None:
        self.proc = await _child(
            "-c", MAIN, "serve", "--events-url", route, "--listen", f"127.0.0.1:{self.port}",
            "--kube", "off", "--log-level", "warning", *self.extra,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL)

    async def scrape(self, session: aiohttp.ClientSession) -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(f"http://127.0.0.1:{self.port}/metrics",
                                   timeout=aiohttp.ClientTimeout(total=30)) as r:
                if r.status == 200:
                    self.last = parse(await r.text())

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


def slope_mib_per_min(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of RSS (KiB) over time (s), in MiB/min."""
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    cov = sum((t - mt) * (r - mr) for t, r in samples)
    return cov / var * 60 / 1024 if var else 0.0


async def soak(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="zaroz-soak-"))
    route_port = free_port()
    route = await _child("-m", "zaroz_sim", "--port", str(route_port), "--workloads",
                         str(args.workloads), "--time-scale", str(args.time_scale),
                         stdout=asyncio.subprocess.PIPE)
    receiver = await _child("-m", "tests.otlp_receiver", stdout=asyncio.subprocess.PIPE,
                            stdin=asyncio.subprocess.PIPE)
    exporters: list[Exporter] = []
    try:
        await _first_line(route, "the route")
        otlp = await _first_line(receiver, "the receiver")
        url = f"http://127.0.0.1:{route_port}"
        exporters = [
            Exporter("no traces", []),
            Exporter("--state-dir", ["--state-dir", str(work / "state-only")]),
            Exporter("traces", ["--otlp-endpoint", otlp]),
            Exporter("traces + --state-dir", ["--otlp-endpoint", otlp,
                                              "--state-dir", str(work / "state")]),
        ]
        for e in exporters:
            await e.start(url)
        t0 = time.monotonic()
        next_scrape = 0.0
        async with aiohttp.ClientSession() as session:
            while (now := time.monotonic() - t0) < args.seconds:
                for e in exporters:
                    assert e.proc is not None
                    if e.proc.returncode is not None:
                        raise RuntimeError(f"serve ({e.name}) exited")
                    e.rss.append((now, proc_status_kib("VmRSS", e.proc.pid)))
                if now >= next_scrape:
                    await asyncio.gather(*(e.scrape(session) for e in exporters))
                    next_scrape = now + args.scrape_interval
                await asyncio.sleep(1.0)
            await asyncio.gather(*(e.scrape(session) for e in exporters))
    finally:
        for e in exporters:
            await e.stop()
        for p in (route, receiver):
            if p.returncode is None:
                p.kill()
                await p.wait()
    header(f"bench.soak: {args.seconds:.0f} s, slope after {args.warmup:.0f} s of warm-up, "
           f"{args.workloads} workloads at {args.time_scale:g}x real time")
    rows = [["exporter", "RSS at warm-up", "RSS at end", "slope MiB/min", "events",
             "spans", "exported", "waiting", "dropped"]]
    for e in exporters:
        after = [s for s in e.rss if s[0] >= args.warmup]
        at_warm = after[0][1] if after else 0
        end = e.rss[-1][1] if e.rss else 0
        ev = sum(v for (name, _), v in e.last.items() if name == "zaroz_events_total")
        traced = ("zaroz_traces_spans_total", frozenset()) in e.last

        def t(name: str, e: Exporter = e, traced: bool = traced) -> str:
            return f"{value(e.last, name):,.0f}" if traced else "-"

        rows.append([e.name, f"{at_warm / 1024:,.1f} MiB", f"{end / 1024:,.1f} MiB",
                     f"{slope_mib_per_min(after):+.2f}", f"{ev:,.0f}",
                     t("zaroz_traces_spans_total"), t("zaroz_traces_spans_exported_total"),
                     t("zaroz_traces_spans_waiting"), t("zaroz_traces_spans_dropped_total")])
    print(table(rows), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=180.0)
    p.add_argument("--warmup", type=float, default=60.0)
    p.add_argument("--workloads", type=int, default=3)
    p.add_argument("--time-scale", type=float, default=50.0,
                   help="simulated seconds per real second (x12 events/s at 3 workloads)")
    p.add_argument("--scrape-interval", type=float, default=5.0)
    asyncio.run(soak(p.parse_args()))


if __name__ == "__main__":
    main()
