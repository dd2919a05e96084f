"""A scrape of a million series: our exposition against prometheus_client's, same labels.

Both registries hold the same series (a labelled gauge family plus labelled histograms). Each is
rendered once (warm-up), then every round changes 1% of the series on both sides and times one
scrape of each, in rotating order. Ours re-renders only the changed lines and joins cached bytes;
prometheus_client formats every sample on every scrape. Then memory (tracemalloc peak of a scrape,
RSS held by each registry, RSS peak of a scrape) and the full HTTP scrape on loopback: our aiohttp
`MetricsServer` against prometheus_client's `start_http_server`, plain and gzip, fetched by curl in
another process (the 2 cores serve one side each).

Run: python -m bench.scrape [--series N] [--histograms H] [--repeat K] [--http-repeat K]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import shutil
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client import disable_created_metrics as prom_disable_created

from bench._common import (
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
from exporter.server import MetricsServer, start_site
from exporter.sinks.metrics.exposition import render
from exporter.sinks.metrics.family import Registry

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
    held_rss: int = 0  # KiB
    rounds: int = 0
    size: int = 0
    hwm: list[int] = field(default_factory=list)  # KiB above the pre-scrape RSS, per scrape


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
    g, h = reg[GAUGE], reg[HIST]
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


def measured_build(build: Callable[[], tuple[Side, R]]) -> tuple[Side, R]:
    """Build one side, noting its time and the RSS it holds afterwards."""
    gc.collect()
    rss0, t = proc_status_kib("VmRSS"), time.perf_counter()
    side, reg = build()
    side.build_s = time.perf_counter() - t
    gc.collect()
    side.held_rss = proc_status_kib("VmRSS") - rss0
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
    reset_peak_rss()
    rss0 = proc_status_kib("VmRSS")
    t = time.perf_counter()
    out = side.scrape()
    elapsed = time.perf_counter() - t
    side.hwm.append(proc_status_kib("VmHWM") - rss0)
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
    prom: tuple[Side, CollectorRegistry],
    gauges: list[tuple[str, ...]],
    hists: list[tuple[str, ...]],
    repeat: int,
) -> list[list[str]]:
    from prometheus_client import start_http_server

    zside, zreg = zaroz
    pside, preg = prom
    runner, base = await start_site(MetricsServer(zreg).app, "127.0.0.1:0")
    httpd, _ = start_http_server(0, addr="127.0.0.1", registry=preg)
    purl = f"http://127.0.0.1:{httpd.server_port}/metrics"
    raw = {zside.name: zside.size, pside.name: pside.size}
    cases = [
        ("MetricsServer (aiohttp)", zside, f"{base}/metrics", False),
        ("MetricsServer (aiohttp)", zside, f"{base}/metrics", True),
        ("prometheus_client http", pside, purl, False),
        ("prometheus_client http", pside, purl, True),
    ]
    results: dict[int, list[tuple[float, float, int]]] = {i: [] for i in range(len(cases))}
    try:
        for r in range(repeat):
            order = list(range(len(cases)))
            for i in order[r % len(order):] + order[: r % len(order)]:
                _, side, url, gz = cases[i]
                change(side, gauges, hists)
                gc.collect()
                results[i].append(await curl(url, gz))
    finally:
        httpd.shutdown()
        await runner.cleanup()
    rows = [["HTTP scrape (curl, loopback)", "encoding", "first byte", "total (median)",
             "bytes on wire", "vs raw"]]
    for i, (name, side, _, gz) in enumerate(cases):
        res = results[i]
        best = min(res, key=lambda x: x[1])
        med = sorted(x[1] for x in res)[len(res) // 2]
        total = f"{ms(best[1])} ({ms(med)})"
        wire = f"{best[2] / raw[side.name]:.3f}"
        rows.append([name, "gzip" if gz else "identity", ms(best[0]), total, f"{best[2]:,}", wire])
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--series", type=int, default=1_000_000, help="labelled gauge series")
    ap.add_argument("--histograms", type=int, default=10_000, help="labelled histogram series")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved in-process scrape rounds")
    ap.add_argument("--http-repeat", type=int, default=2, help="interleaved HTTP rounds (0: skip)")
    args = ap.parse_args(argv)

    header("scrape")
    prom_disable_created()  # no _created samples: the same lines on both sides
    t = time.perf_counter()
    gauges, hists = label_values(args.series, args.histograms, seed=7)
    rss = mib(proc_status_kib("VmRSS") * 1024)
    print(f"labels for {len(gauges):,} gauge + {len(hists):,} histogram series in "
          f"{time.perf_counter() - t:.1f} s; RSS {rss}", flush=True)
    zaroz = measured_build(lambda: build_zaroz(gauges, hists))
    prom = measured_build(lambda: build_prom(gauges, hists))
    zside, pside = zaroz[0], prom[0]
    for side in (zside, pside):  # warm-up: everything rendered once
        t = time.perf_counter()
        side.size = len(side.scrape())
        first = ms(time.perf_counter() - t)
        print(f"{side.name}: built in {side.build_s:.1f} s, first scrape {first}, "
              f"{side.size:,} bytes", flush=True)

    times = interleaved(
        {s.name: (lambda s=s: timed_scrape(s, gauges, hists)) for s in (zside, pside)}, args.repeat
    )
    peaks = {s.name: traced_peak(s, gauges, hists) for s in (zside, pside)}
    print(f"\nscrape after changing {CHANGED:.0%} of series, best of {args.repeat}, interleaved")
    rows = [["in-process scrape", "time best (median, max)", "bytes", "tracemalloc peak",
             "RSS held by registry", "RSS peak of scrape"]]
    for s in (zside, pside):
        rows.append([s.name, spread(times[s.name]), f"{s.size:,}", mib(peaks[s.name]),
                     mib(s.held_rss * 1024), mib(max(s.hwm) * 1024)])
    print(table(rows))
    ratio = min(times[pside.name]) / min(times[zside.name])
    print(f"prometheus_client / zaroz scrape time = {ratio:.1f}x; "
          f"process VmHWM {mib(proc_status_kib('VmHWM') * 1024)} (since the last reset)\n",
          flush=True)

    if args.http_repeat > 0:
        if shutil.which("curl") is None:
            print("HTTP scrape skipped: curl not found")
            return
        rows = asyncio.run(http_rounds(zaroz, prom, gauges, hists, args.http_repeat))
        print(f"HTTP scrape after changing {CHANGED:.0%} of series, best of {args.http_repeat}, "
              "interleaved")
        print(table(rows))


if __name__ == "__main__":
    main()
