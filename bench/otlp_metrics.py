"""One OTLP metrics export at `--unitsignals` live units, beside rendering the same scrape.

The registry: bench.cluster's UnitSignal mix (per-object tables, a dozen families each) built
in-process through the Kubernetes emulator's write API. Each round changes 1% of the objects,
then times, in rotating order:

- the text scrape's render (what a Prometheus scrape holds the event loop for);
- the protobuf scrape's render (the same, as protobuf);
- the export's part on the loop: its protobuf render (primed ahead in slices, as the server
  primes a scrape), which is all it holds the loop for;
- the export's part off the loop: reading the snapshot back and building the OTLP requests
  (the worker thread), serialized, with the largest stall a 1 ms ticker on the event loop saw
  meanwhile (the GIL is shared: the loop runs between the worker's switch intervals).

Run: python -m bench.otlp_metrics [--unitsignals N] [--repeat K] [--max-points P]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from typing import Any

import orjson

from bench._common import header, interleaved, ms, spread, table
from exporter.sinks.metrics.exposition import Format, render, render_bytes
from exporter.sinks.metrics.otlp import client_model, encode
from exporter.sinks.metrics.pbprime import prime_steps


def build(n: int) -> tuple[Any, Any, list[bytes]]:
    from bench.cluster import NS, FakeClock, Shape, fresh_model, populate
    from zaroz_sim.kube.emulator import KubeEmulator

    clock = FakeClock(time.time_ns() - 86_400 * NS, NS // 4)
    emu = KubeEmulator(seed=1, clock=clock)
    objects: list[bytes] = []
    create = emu.create
    emu.create = lambda *a, **kw: objects.append(orjson.dumps(create(*a, **kw)))  # type: ignore
    populate(emu, Shape(n, 20, 50, 64, 1), clock)
    reg, model = fresh_model()
    now = time.time()
    for raw in objects:
        model.upsert(orjson.loads(raw), now)
    return reg, model, objects


def otlp(chunks: list[bytes], max_points: int) -> tuple[int, int, int]:
    """The worker's part: requests built and serialized; (requests, points, bytes)."""
    start_of = encode.starts_of({}, 0, 0, frozenset(), frozenset())
    reqs = points = size = 0
    ms_ = encode.metrics(client_model.raw_families(chunks), time.time_ns(), start_of)
    resource = encode.resource_attributes({"service.name": "b"})
    for req, n in encode.requests(ms_, max_points):
        size += len(encode.encode_request(req, resource))
        reqs += 1
        points += n
    return reqs, points, size


async def off_loop(chunks: list[bytes], max_points: int) -> tuple[float, float, Any]:
    """The worker's part in a thread, and the largest lateness of a 1 ms ticker on the loop."""
    worst = 0.0
    done = False

    async def tick() -> None:
        nonlocal worst
        while not done:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - t - 0.001)

    ticker = asyncio.create_task(tick())
    t = time.perf_counter()
    got = await asyncio.to_thread(otlp, chunks, max_points)
    elapsed = time.perf_counter() - t
    done = True
    await ticker
    return elapsed, worst, got


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--unitsignals", type=int, default=100_000, help="UnitSignal objects")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--max-points", type=int, default=20_000, help="points per request")
    args = ap.parse_args(argv)
    header("otlp_metrics")
    from bench.cluster import CHANGED, EventSource, apply_lines

    t0 = time.perf_counter()
    reg, model, objects = build(args.unitsignals)
    for _ in prime_steps(reg):
        pass
    render_bytes(reg, Format.PROTOBUF)
    print(f"{args.unitsignals:,} UnitSignals built in {time.perf_counter() - t0:.1f} s, "
          f"{reg.series_count():,} series", flush=True)
    source = EventSource(objects, 0, 1)
    changed = max(1, int(args.unitsignals * CHANGED))
    held: dict[str, list[float]] = {}
    stalls: list[float] = []
    worker: list[float] = []
    got: list[Any] = []

    def change() -> None:
        apply_lines(model, source.lines(changed, distinct=True))
        gc.collect()

    def text() -> float:
        change()
        t = time.perf_counter()
        b"".join(render(reg))
        return time.perf_counter() - t

    def pb() -> float:
        change()
        t = time.perf_counter()
        render_bytes(reg, Format.PROTOBUF)
        return time.perf_counter() - t

    def export() -> float:
        change()
        slices = []
        last = time.perf_counter()
        for _ in prime_steps(reg, text=False):
            now = time.perf_counter()
            slices.append(now - last)
            last = now
        t = time.perf_counter()
        chunks = list(render(reg, Format.PROTOBUF))
        on_loop = time.perf_counter() - t
        held.setdefault("slice", []).append(max(slices, default=0.0))
        elapsed, worst, result = asyncio.run(off_loop(chunks, args.max_points))
        worker.append(elapsed)
        stalls.append(worst)
        got.append(result)
        return on_loop

    times = interleaved({"text scrape render": text, "protobuf scrape render": pb,
                         "OTLP export, on the loop": export}, args.repeat)
    reqs, points, size = got[-1]
    print(f"\nafter {changed:,} of {args.unitsignals:,} UnitSignals changed, best of "
          f"{args.repeat}, interleaved")
    rows = [["", "loop held, best (median, max)"]]
    rows += [[n, spread(v)] for n, v in times.items()]
    rows.append(["OTLP export, longest priming slice", spread(held["slice"])])
    print(table(rows))
    print(f"\nOTLP export off the loop (worker thread): {spread(worker)}; {reqs} requests, "
          f"{points:,} points, {size:,} bytes serialized; the loop's 1 ms ticker was late "
          f"by at most {ms(max(stalls))} meanwhile")
    t, e = min(times["text scrape render"]), min(times["OTLP export, on the loop"])
    print(f"export on the loop / text scrape render = {e / t:.2f}x (target <= 1x: the export "
          "must not hold the loop longer than a scrape)")
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
