"""What `--metric-denylist 'zaroz_unitsignal_.*'` saves at 100k UnitSignals, next to the default.

The same LIST pages (served once by `KubeEmulator` in its own process, as bench/cluster.py does)
are synced into two exporters, each as the reflector does it (page by page, collector paused):
one with the default families, one with the per-UnitSignal families denied. Interleaved, best of
K: the sync (decode + apply), the first scrape (`render` of everything), the exposition's size
and series, and what the model and registry hold (tracemalloc of a sync of the first
`--traced-objects` objects, per object).

Run: python -m bench.families [--objects N] [--repeat K] [--traced-objects N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
import tracemalloc
from collections.abc import Callable

import orjson

from bench._common import header, interleaved, mib, ms, spread, table
from bench.cluster import ALLOWLIST, PAGE_SIZE, Emulator, Shape, fetch_pages, release_frozen
from exporter.sinks.metrics.exposition import render
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.selection import FamilyFilter
from exporter.wiring.unitsignals import NamespaceHandler, build_cluster

DENY = "zaroz_unitsignal_.*"
CASES: dict[str, FamilyFilter] = {
    "default": FamilyFilter.parse(),
    f"--metric-denylist '{DENY}'": FamilyFilter.parse(deny=[DENY]),
}


def sync(pages: list[bytes], families: FamilyFilter) -> tuple[float, Registry, object]:
    """Seconds to decode and apply every page, the registry and the model it filled."""
    reg = Registry()
    reg.select(families.included)
    model, _ = build_cluster(reg, ALLOWLIST)
    handler = NamespaceHandler(model, None)
    release_frozen()
    now = time.time()
    listed: set[tuple[str, str]] = set()
    gc.disable()
    try:
        t = time.perf_counter()
        for page in pages:
            items = orjson.loads(page)["items"]
            listed.update(handler.list_page(items, now))
            del items
        handler.list_done(listed, now)
        took = time.perf_counter() - t
    finally:
        gc.enable()
        gc.freeze()
    return took, reg, model


def scrape(reg: Registry) -> tuple[float, bytes]:
    t = time.perf_counter()
    body = b"".join(render(reg))
    return time.perf_counter() - t, body


def held_per_object(pages: list[bytes], families: FamilyFilter, n: int) -> float:
    """Bytes the model and registry keep per object after a sync and a scrape (tracemalloc)."""
    objects = sum(len(orjson.loads(p)["items"]) for p in pages)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    _, reg, model = sync(pages, families)
    scrape(reg)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del reg, model
    release_frozen()
    return held / max(1, objects) if n else 0.0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--objects", type=int, default=100_000)
    p.add_argument("--namespaces", type=int, default=20)
    p.add_argument("--workloads", type=int, default=50)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--traced-objects", type=int, default=10_000)
    args = p.parse_args(argv)
    shape = Shape(args.objects, args.namespaces, args.workloads, user_data=256, seed=11)
    header(f"families: --metric-denylist against the default, {args.objects:,} UnitSignals")
    emu = Emulator.start(shape)
    try:
        pages = asyncio.run(fetch_pages(emu.url))
    finally:
        emu.stop()
    print(f"emulator: {args.objects:,} objects built in {emu.build_s:.1f} s; "
          f"{len(pages)} LIST pages of {PAGE_SIZE}, {mib(sum(map(len, pages)))}", flush=True)

    results: dict[str, dict[str, object]] = {name: {} for name in CASES}

    def case(name: str) -> Callable[[], float]:
        def run() -> float:
            took, reg, model = sync(pages, CASES[name])
            scrape_s, body = scrape(reg)
            r = results[name]
            r.setdefault("scrape", []).append(scrape_s)  # type: ignore[union-attr]
            r["bytes"], r["series"] = len(body), reg.series_count()
            r["per_object"] = body.count(b'unitsignal="')
            del reg, model, body
            release_frozen()
            return took
        return run

    syncs = interleaved({name: case(name) for name in CASES}, args.repeat)
    traced = pages[: max(1, args.traced_objects // PAGE_SIZE)]
    held = {name: held_per_object(traced, f, args.traced_objects) for name, f in CASES.items()}

    rows = [("case", "sync (decode + apply)", "first scrape", "exposition", "series",
             "per-UnitSignal series", "held per object")]
    for name in CASES:
        r = results[name]
        rows.append((name, spread(syncs[name]), spread(r["scrape"]),  # type: ignore[arg-type]
                     mib(r["bytes"]), f"{r['series']:,}", f"{r['per_object']:,}",  # type: ignore[arg-type]
                     f"{held[name]:,.0f} B"))
    print(f"best of {args.repeat}, interleaved; held: tracemalloc of a "
          f"{len(traced) * PAGE_SIZE:,}-object sync and scrape")
    print(table(rows))
    default, denied = (min(syncs[n]) for n in CASES)
    s_default, s_denied = (min(results[n]["scrape"]) for n in CASES)  # type: ignore[type-var]
    h_default, h_denied = held.values()
    print(f"denylist against default: sync {ms(denied)} vs {ms(default)} "
          f"({denied / default:.0%}), scrape {ms(s_denied)} vs {ms(s_default)} "
          f"({s_denied / s_default:.1%}), held {h_denied / h_default:.0%} per object")


if __name__ == "__main__":
    main(sys.argv[1:])
