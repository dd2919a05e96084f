"""A scrape of a million series: our exposition against prometheus_client's, same labels.

Both registries hold the same series (a labelled gauge family plus labelled histograms). Ours is
rendered once (warm-up); then every round changes 1% of the series on both sides and times one
scrape of each, in rotating order. Ours re-renders only the changed lines and joins cached bytes;
prometheus_client formats every sample on every scrape.

Memory: tracemalloc peak of one scrape (prometheus_client's with --trace-prom only: tracing makes
its scrape ~6x slower), and RSS from two child processes, one side each, run before the timing:
RSS a registry holds, RSS a scrape adds. HTTP: the full scrape through `MetricsServer` (aiohttp)
on loopback, identity and gzip, fetched by curl in another process; --prom-http adds
prometheus_client's `start_http_server` (its gzip is level 9, ~30 s a round at 1M series).

Run: python -m bench.scrape [--series N] [--histograms H] [--repeat K] [--http-repeat K]
                            [--prom-http] [--trace-prom]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import resource
import shutil
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client import disable_created_metrics as prom_disable_created

from bench._common import (
    child_env,
    header,
    interleaved,
    mib,
    ms,
    proc_status_kib,
    reset_peak_rss,
    spread,
    table,
)
from exporter import catalog
from exporter.catalog import Kind, Metric
from exporter.sinks.metrics.exposition import render
from exporter.sinks.metrics.family import Registry
from exporter.web.app import MetricsServer, start_site

GAUGE = "zaroz_bench_unitsignal_value"
HIST = "zaroz_bench_unitsignal_latency_seconds"
GAUGE_LABELS = ("namespace", "unitsignal", "workload")
HIST_LABELS = ("namespace", "workload")
TEAMS = ("payments", "search", "matchmaking", "render-farm", "edge", "ml-platform", "chat", "ads")
ENVS = ("production", "staging", "canary", "eu-west-1-prod", "us-east-2-prod")
SIGNALS = ("queue-depth", "inflight-requests", "gpu-utilisation", "heap-bytes", "open-sessions")
CHANGED = 0.01  # share of series changed between scrapes
R = TypeVar("R")


@dataclass
class Side:
    """One exposition implementation: how to change a series and how to scrape everything."""

    name: str
    set_gauge: Callable[[tuple[str, ...], float], None]
    observe: Callable[[tuple[str, ...], float], None]
    scrape: Callable[[], bytes]
    build_s: float = 0.0
    first_s: float = 0.0
    rounds: int = 0
    size: int = 0


def label_values(series: int, histograms: int, seed: int) -> tuple[list[tuple[str, ...]], ...]:
    """Realistic label values: ~70 bytes per gauge series (namespace ~20, unitsignal ~35,
    workload ~20), shared by both sides so neither is billed for them."""
    rng = random.Random(seed)
    namespaces = [f"{t}-{e}" for t in TEAMS for e in ENVS]
    workloads = [f"wl-{rng.choice(TEAMS)}-{i:05d}-{rng.getrandbits(16):04x}" for i in range(5000)]
    gauges = [
        (
            rng.choice(namespaces),
            f"us-{rng.choice(SIGNALS)}-{i:07d}-{rng.getrandbits(40):010x}",
            rng.choice(workloads),
        )
        for i in range(series)
    ]
    hists = [(namespaces[i % len(namespaces)], workloads[i % len(workloads)] + f"-{i // 5000}")
             for i in range(histograms)]
    return gauges, hists


def first_value(rng: random.Random) -> float:
    """Half integral (counts, bytes), half fractional (ratios): both formats matter."""
    return float(rng.randrange(1_000_000)) if rng.random() < 0.5 else round(rng.random() * 100, 3)


def build_zaroz(
    gauges: list[tuple[str, ...]], hists: list[tuple[str, ...]]
) -> tuple[Side, Registry]:
    extra = (
        Metric(GAUGE, Kind.GAUGE, "Latest value of a unit signal.", GAUGE_LABELS),
        Metric(HIST, Kind.HISTOGRAM, "Unit signal round trip.", HIST_LABELS,
               catalog.READY_BUCKETS, "seconds"),
    )
    reg = Registry((*catalog.METRICS, *extra))  # the catalog too: MetricsServer needs its gauges
    g, h = reg.gauge(GAUGE), reg.histogram(HIST)
    rng = random.Random(1)
    for vals in gauges:
        g.labels(*vals).set(first_value(rng))
    for vals in hists:
        s = h.labels(*vals)
        for _ in range(5):
            s.observe_ns(int(rng.lognormvariate(1.8, 0.6) * 1e9))
    side = Side(
        "zaroz render",
        lambda vals, v: g.labels(*vals).set(v),
        lambda vals, sec: h.labels(*vals).observe_ns(int(sec * 1e9)),
        lambda: b"".join(render(reg)),
    )
    return side, reg


def build_prom(
    gauges: list[tuple[str, ...]], hists: list[tuple[str, ...]]
) -> tuple[Side, CollectorRegistry]:
    reg = CollectorRegistry()
    g = Gauge(GAUGE, "Latest value of a unit signal.", GAUGE_LABELS, registry=reg)
    h = Histogram(HIST, "Unit signal round trip.", HIST_LABELS, registry=reg,
                  buckets=catalog.READY_BUCKETS)
    rng = random.Random(1)
    for vals in gauges:
        g.labels(*vals).set(first_value(rng))
    for vals in hists:
        s = h.labels(*vals)
        for _ in range(5):
            s.observe(int(rng.lognormvariate(1.8, 0.6) * 1e9) / 1e9)
    side = Side(
        "prometheus_client generate_latest",
        lambda vals, v: g.labels(*vals).set(v),
        lambda vals, sec: h.labels(*vals).observe(sec),
        lambda: generate_latest(reg),
    )
    return side, reg


def measured_build(build: Callable[[], tuple[Side, R]], warm_up: bool) -> tuple[Side, R]:
    """Build one side, noting its time; ours is rendered once (the warm-up scrape)."""
    gc.collect()
    t = time.perf_counter()
    side, reg = build()
    side.build_s = time.perf_counter() - t
    if warm_up:
        t = time.perf_counter()
        side.size = len(side.scrape())
        side.first_s = time.perf_counter() - t
    return side, reg


def change(side: Side, gauges: list[tuple[str, ...]], hists: list[tuple[str, ...]]) -> None:
    """Round r of a side changes the same 1% of series to the same values as on the other side."""
    side.rounds += 1
    rng = random.Random(side.rounds)
    for vals in rng.sample(gauges, max(1, int(len(gauges) * CHANGED))):
        side.set_gauge(vals, first_value(rng))
    for vals in rng.sample(hists, max(1, int(len(hists) * CHANGED))) if hists else ():
        side.observe(vals, rng.lognormvariate(1.8, 0.6))


def timed_scrape(side: Side, gauges: list[tuple[str, ...]], hists: list[tuple[str, ...]]) -> float:
    change(side, gauges, hists)
    gc.collect()
    t = time.perf_counter()
    out = side.scrape()
    elapsed = time.perf_counter() - t
    side.size = len(out)
    del out
    return elapsed


def traced_peak(side: Side, gauges: list[tuple[str, ...]], hists: list[tuple[str, ...]]) -> int:
    """Bytes allocated at the peak of one scrape (objects alive before it are not counted)."""
    change(side, gauges, hists)
    gc.collect()
    tracemalloc.start()
    out = side.scrape()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del out
    return peak


CURL_FORMAT = "%{time_starttransfer} %{time_total} %{size_download} %{http_code}"


def child(which: str, series: int, histograms: int) -> None:
    """One side alone in a fresh process, so its RSS figures are its own: RSS held after building
    and rendering once, then the RSS a scrape adds on top (VmHWM reset just before it)."""
    prom_disable_created()
    gauges, hists = label_values(series, histograms, seed=7)
    gc.collect()
    base = proc_status_kib("VmRSS")
    build = build_zaroz if which == "zaroz" else build_prom
    side, _ = build(gauges, hists)
    side.scrape()
    change(side, gauges, hists)
    gc.collect()
    held = proc_status_kib("VmRSS")
    reset_ok = reset_peak_rss()
    out = side.scrape()
    peak = proc_status_kib("VmHWM")
    del out
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps({"labels": base, "held": held - base, "scrape": peak - held,
                      "hwm_reset": reset_ok, "maxrss": maxrss}))


def start_children(series: int, histograms: int) -> dict[str, subprocess.Popen[str]]:
    """Both memory children at once: only their memory is read, and they finish before timing."""
    return {
        which: subprocess.Popen(
            [sys.executable, "-m", "bench.scrape", "--child", which, "--series", str(series),
             "--histograms", str(histograms)],
            stdout=subprocess.PIPE, text=True, env=child_env(),
        )
        for which in ("zaroz", "prom")
    }


def memory_rows(children: dict[str, subprocess.Popen[str]]) -> list[list[str]]:
    rows = [["memory (own process each)", "RSS labels alone", "RSS held by registry",
             "RSS added by a scrape", "ru_maxrss of process"]]
    for which, proc in children.items():
        out, _ = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"memory child {which} failed ({proc.returncode})")
        r = json.loads(out)
        name = "zaroz render" if which == "zaroz" else "prometheus_client generate_latest"
        added = mib(r["scrape"] * 1024) if r["hwm_reset"] else "n/a (no clear_refs)"
        rows.append([name, mib(r["labels"] * 1024), mib(r["held"] * 1024), added,
                     mib(r["maxrss"] * 1024)])
    return rows


async def curl(url: str, gz: bool) -> tuple[float, float, int]:
    """Time to first byte, total time and body bytes as received (compressed when gzip)."""
    cmd = ["curl", "-sS", "-o", "/dev/null", "-w", CURL_FORMAT, url]
    if gz:
        cmd[1:1] = ["-H", "Accept-Encoding: gzip"]
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    ttfb, total, size, code = out.decode().split()
    if code != "200":
        raise RuntimeError(f"{url}: HTTP {code}")
    return float(ttfb), float(total), int(size)


async def http_rounds(
    zaroz: tuple[Side, Registry],
    prom: tuple[Side, CollectorRegistry] | None,
    gauges: list[tuple[str, ...]],
    hists: list[tuple[str, ...]],
    repeat: int,
) -> list[list[str]]:
    """Identity against gzip on our server; prometheus_client's own server too when given."""
    zside, zreg = zaroz
    runner, base = await start_site(MetricsServer(zreg).app, "127.0.0.1:0")
    cases = [
        ("MetricsServer (aiohttp)", zside, f"{base}/metrics", False),
        ("MetricsServer (aiohttp)", zside, f"{base}/metrics", True),
    ]
    httpd = None
    if prom is not None:
        from prometheus_client import start_http_server

        httpd, _ = start_http_server(0, addr="127.0.0.1", registry=prom[1])
        purl = f"http://127.0.0.1:{httpd.server_port}/metrics"
        cases += [
            ("prometheus_client http", prom[0], purl, False),
            ("prometheus_client http", prom[0], purl, True),
        ]
    results: dict[int, list[tuple[float, float, int]]] = {i: [] for i in range(len(cases))}
    try:
        for r in range(repeat):
            order = list(range(len(cases)))
            for i in order[r % len(order) :] + order[: r % len(order)]:
                _, side, url, gz = cases[i]
                change(side, gauges, hists)
                gc.collect()
                results[i].append(await curl(url, gz))
    finally:
        if httpd is not None:
            httpd.shutdown()
        await runner.cleanup()
    rows = [["HTTP scrape (curl, loopback)", "encoding", "first byte", "total best (median)",
             "bytes on wire", "wire / raw"]]
    for i, (name, side, _, gz) in enumerate(cases):
        res = results[i]
        best = min(res, key=lambda x: x[1])
        med = sorted(x[1] for x in res)[len(res) // 2]
        total = f"{ms(best[1])} ({ms(med)})"
        wire = f"{best[2] / side.size:.3f}"
        rows.append([name, "gzip" if gz else "identity", ms(best[0]), total, f"{best[2]:,}", wire])
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--series", type=int, default=1_000_000, help="labelled gauge series")
    ap.add_argument("--histograms", type=int, default=10_000, help="labelled histogram series")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved in-process scrape rounds")
    ap.add_argument("--http-repeat", type=int, default=3, help="interleaved HTTP rounds (0: skip)")
    ap.add_argument("--prom-http", action="store_true",
                    help="also scrape prometheus_client's HTTP server (+~30 s a round at 1M)")
    ap.add_argument("--trace-prom", action="store_true",
                    help="also tracemalloc prometheus_client's scrape (~6x its scrape time)")
    ap.add_argument("--child", choices=("zaroz", "prom"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.series, args.histograms)
        return

    header("scrape")
    t0 = time.perf_counter()
    children = start_children(args.series, args.histograms)
    mem = memory_rows(children)  # before any timing: the children use both cores
    print(f"memory children done in {time.perf_counter() - t0:.0f} s", flush=True)
    prom_disable_created()  # no _created samples: the same lines on both sides
    t = time.perf_counter()
    gauges, hists = label_values(args.series, args.histograms, seed=7)
    print(f"labels for {len(gauges):,} gauge + {len(hists):,} histogram series in "
          f"{time.perf_counter() - t:.1f} s", flush=True)
    zaroz = measured_build(lambda: build_zaroz(gauges, hists), warm_up=True)
    prom = measured_build(lambda: build_prom(gauges, hists), warm_up=False)
    zside, pside = zaroz[0], prom[0]
    print(f"{zside.name}: built in {zside.build_s:.1f} s, first (full) scrape "
          f"{ms(zside.first_s)}; {pside.name}: built in {pside.build_s:.1f} s", flush=True)
    sides = (zside, pside) if args.trace_prom else (zside,)
    peaks = {s.name: mib(traced_peak(s, gauges, hists)) for s in sides}
    times = interleaved(
        {s.name: (lambda s=s: timed_scrape(s, gauges, hists)) for s in (zside, pside)}, args.repeat
    )
    print(f"\nscrape after changing {CHANGED:.0%} of series, best of {args.repeat}, interleaved")
    rows = [["in-process scrape", "time best (median, max)", "bytes", "tracemalloc peak"]]
    for s in (zside, pside):
        peak = peaks.get(s.name, "(--trace-prom)")
        rows.append([s.name, spread(times[s.name]), f"{s.size:,}", peak])
    print(table(rows))
    ratio = min(times[pside.name]) / min(times[zside.name])
    print(f"prometheus_client / zaroz scrape time = {ratio:.1f}x\n")
    print(table(mem))
    print("(RSS added by a scrape: VmHWM above the RSS just before it; memory the process had "
          "freed earlier is reused without counting)\n", flush=True)

    if args.http_repeat > 0:
        if shutil.which("curl") is None:
            print("HTTP scrape skipped: curl not found")
            return
        rows = asyncio.run(
            http_rounds(zaroz, prom if args.prom_http else None, gauges, hists, args.http_repeat)
        )
        print(f"HTTP scrape after changing {CHANGED:.0%} of series, best of {args.http_repeat}, "
              "interleaved")
        print(table(rows))
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
