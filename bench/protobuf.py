"""The protobuf exposition against the text one: a million series, scraped after a 1% change.

1. Series: two registries built the same way as bench.scrape's (a labelled gauge family of
   `--series` plus `--histograms` labelled histograms, native buckets on), one scraped as text
   0.0.4, the other as protobuf, so each side's change-only caches see only their own scrapes.
   Every round changes the same 1% of series on both sides and times one scrape of each, in
   rotating order. Target: the protobuf scrape at most 1.5x the text scrape.
2. UnitSignals: `--unitsignals` objects (bench.cluster's mix, built through the Kubernetes
   emulator's write API in-process) in two UnitSignal models, the per-object tables (a dozen
   families, rendered by chunk; protobuf straight from the rows by each column's protobuf
   renderer). Every round applies the same watch writes to 1% of the objects on both sides, then
   times one scrape each. Target: at most 1.5x the text scrape.
3. Both parts print how the first protobuf scrape's full encoding is primed ahead in slices
   (exporter/sinks/metrics/pbprime.py): the longest slice is the longest the event loop waits.

Run: python -m bench.protobuf [--series N] [--histograms H] [--unitsignals N] [--repeat K]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import Any

import orjson

from bench._common import header, interleaved, ms, spread, table
from bench.scrape import Side, build_zaroz, change, label_values, timed_scrape
from exporter.sinks.metrics.exposition import Format, render, render_bytes
from exporter.sinks.metrics.pbprime import prime_steps


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--series", type=int, default=1_000_000, help="labelled gauge series")
    ap.add_argument("--histograms", type=int, default=10_000, help="labelled histogram series")
    ap.add_argument("--unitsignals", type=int, default=100_000,
                    help="UnitSignal objects (0: skip that part)")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved scrape rounds")
    args = ap.parse_args(argv)

    header("protobuf")
    t0 = time.perf_counter()
    gauges, hists = label_values(args.series, args.histograms, seed=7)
    sides: dict[str, Side] = {}

    def pb_scrape(reg: Any) -> bytes:
        return render_bytes(reg, Format.PROTOBUF)

    for name, scrape in (("text 0.0.4", lambda reg: b"".join(render(reg))),
                         ("protobuf (delimited)", pb_scrape)):
        gc.collect()
        t = time.perf_counter()
        side, reg = build_zaroz(gauges, hists)
        side.name, side.scrape = name, (lambda reg=reg, scrape=scrape: scrape(reg))
        side.build_s = time.perf_counter() - t
        primed = primed_first(reg) if scrape is pb_scrape else ""
        t = time.perf_counter()
        side.size = len(side.scrape())
        side.first_s = time.perf_counter() - t
        sides[name] = side
        print(f"{name}: built in {side.build_s:.1f} s, first (full) scrape {ms(side.first_s)}"
              f"{' after priming' if primed else ' (loop held throughout)'}, "
              f"{side.size:,} bytes{primed}", flush=True)
    for side in sides.values():  # one round each before timing, so both caches are warm
        change(side, gauges, hists)
        side.scrape()
    times = interleaved({n: (lambda s=s: timed_scrape(s, gauges, hists))
                         for n, s in sides.items()}, args.repeat)
    print(f"\nscrape after changing 1% of {len(gauges):,} gauge + {len(hists):,} histogram "
          f"series, best of {args.repeat}, interleaved")
    rows = [["in-process scrape", "time best (median, max)", "bytes"]]
    rows += [[n, spread(times[n]), f"{s.size:,}"] for n, s in sides.items()]
    print(table(rows))
    text, pb = (min(times[n]) for n in sides)
    print(f"protobuf / text scrape time = {pb / text:.2f}x (target <= 1.5x)")

    if args.unitsignals:
        unitsignals(args.unitsignals, args.repeat)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


def primed_first(reg: Any) -> str:
    """The first protobuf scrape's encoding done ahead as the server does it (pbprime: slices
    with the loop run between them); what holds the loop is the longest slice, then the scrape's
    render of what is left. Returns the figures as text."""
    gaps = []
    t0 = last = time.perf_counter()
    for _ in prime_steps(reg, text=False):
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    now = time.perf_counter()
    gaps.append(now - last)
    return (f"\n  first protobuf encoding primed ahead: {len(gaps):,} slices, "
            f"{ms(now - t0)} in all, the loop held at most {ms(max(gaps))} at a time "
            f"(median slice {ms(sorted(gaps)[len(gaps) // 2])}); unprimed, one render held it "
            f"for all of it")


def unitsignals(n: int, repeat: int) -> None:
    from bench.cluster import (
        CHANGED,
        NS,
        EventSource,
        FakeClock,
        Shape,
        apply_lines,
        fresh_model,
        populate,
    )
    from zaroz_sim.kube.emulator import KubeEmulator

    t = time.perf_counter()
    clock = FakeClock(time.time_ns() - 86_400 * NS, NS // 4)
    emu = KubeEmulator(seed=1, clock=clock)
    objects: list[bytes] = []
    create = emu.create
    emu.create = lambda *a, **kw: objects.append(orjson.dumps(create(*a, **kw)))  # type: ignore
    populate(emu, Shape(n, 20, 50, 64, 1), clock)
    del emu
    print(f"\n{n:,} UnitSignals built in {time.perf_counter() - t:.1f} s", flush=True)
    cases: dict[str, tuple[Any, Callable[[], bytes]]] = {}
    for name, fmt in (("text 0.0.4", False), ("protobuf (delimited)", Format.PROTOBUF)):
        reg, model = fresh_model()
        now = time.time()
        for raw in objects:
            model.upsert(orjson.loads(raw), now)
        primed = primed_first(reg) if fmt is Format.PROTOBUF else ""
        t = time.perf_counter()
        size = len(render_bytes(reg, fmt))
        print(f"{name}: first (full) scrape {ms(time.perf_counter() - t)}"
              f"{' after priming' if primed else ' (loop held throughout)'}, {size:,} bytes"
              f"{primed}", flush=True)
        cases[name] = (model, lambda reg=reg, fmt=fmt: render_bytes(reg, fmt))
    source = EventSource(objects, 0, 1)
    changed = max(1, int(n * CHANGED))
    batches: list[list[bytes]] = []
    sizes: dict[str, int] = {}

    def one(name: str) -> float:
        model, scrape = cases[name]
        rounds = sum(1 for b in batches if b)  # both sides get the same batches, in order
        mine = scrape_rounds[name] = scrape_rounds.get(name, 0) + 1
        if mine > rounds:
            batches.append(source.lines(changed, distinct=True))
        apply_lines(model, batches[mine - 1])
        gc.collect()
        t = time.perf_counter()
        out = scrape()
        elapsed = time.perf_counter() - t
        sizes[name] = len(out)
        return elapsed

    scrape_rounds: dict[str, int] = {}
    for name in cases:  # one round each before timing, so both caches are warm
        one(name)
    times = interleaved({name: (lambda name=name: one(name)) for name in cases}, repeat)
    print(f"\nscrape after {changed:,} of {n:,} UnitSignals ({CHANGED:.0%}) changed, best of "
          f"{repeat}, interleaved")
    rows = [["in-process scrape", "time best (median, max)", "bytes"]]
    rows += [[name, spread(times[name]), f"{sizes[name]:,}"] for name in cases]
    print(table(rows))
    text, pb = (min(times[name]) for name in cases)
    print(f"protobuf / text scrape time = {pb / text:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
