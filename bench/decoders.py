"""What the watch line's decode would cost with other JSON decoders: evidence for a decision.

The cluster benchmark's watch target (100,000 events/s, 10 µs an event) sits below what
`orjson.loads` leaves: decoding a UnitSignal watch line takes ~6 µs of those 10 µs before the
model reads a field. This measures, on the same MODIFIED lines, what decoders outside the
project's given libraries would leave instead; they are imported only if installed (nothing in
the exporter uses them):

- `orjson.loads`: today's decode, the whole object into dicts.
- `msgspec` untyped: the whole object into dicts, msgspec's parser.
- `msgspec` typed: only what the watch path reads: the metadata fields, the status as a dict;
  the spec and managedFields kept as `msgspec.Raw` (bytes, decoded only when the generation
  moves or on first sight), every other field skipped by the parser.
- `pysimdjson`: a lazy document, the same fields read out of it.

    python -m bench.decoders [--objects N] [--events N] [--repeat K]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import orjson

from bench._common import header, interleaved, table
from bench.cluster import NS, EventSource, FakeClock, Shape, populate
from exporter.sim.kube import KubeEmulator

TARGET_EVENTS_S = 100_000.0

try:
    import msgspec
except ImportError:
    msgspec = None
else:
    class _Meta(msgspec.Struct):
        name: str | None = None
        namespace: str | None = None
        uid: str | None = None
        resourceVersion: str | None = None
        generation: int | None = None
        creationTimestamp: str | None = None
        labels: dict[str, str] | None = None
        managedFields: msgspec.Raw = msgspec.Raw(b"null")

    class _Obj(msgspec.Struct):
        metadata: _Meta
        spec: msgspec.Raw = msgspec.Raw(b"null")
        status: dict[str, Any] | None = None

    class _Event(msgspec.Struct):
        type: str
        object: _Obj


def decoders() -> dict[str, Callable[[bytes], Any] | str]:
    """Each case's decode of one watch line, or why it cannot run here."""
    cases: dict[str, Callable[[bytes], Any] | str] = {"orjson.loads (today)": orjson.loads}
    if msgspec is None:
        cases["msgspec, untyped"] = cases["msgspec, typed (fields read)"] = (
            "not installed (pip install msgspec)")
    else:
        cases["msgspec, untyped"] = msgspec.json.Decoder().decode
        cases["msgspec, typed (fields read)"] = msgspec.json.Decoder(_Event).decode
    try:
        import simdjson
    except ImportError:
        cases["pysimdjson, lazy (fields read)"] = "not installed (pip install pysimdjson)"
    else:
        parser = simdjson.Parser()

        def lazy(line: bytes) -> tuple[Any, ...]:
            doc = parser.parse(line)
            obj = doc["object"]
            meta, status = obj["metadata"], obj["status"]
            out = (doc["type"], meta["name"], meta["namespace"], meta["uid"],
                   meta["resourceVersion"], meta["generation"], meta["labels"].as_dict(),
                   status.as_dict())  # fmt: skip
            del doc, obj, meta, status  # the parser is reused: no proxy may outlive a line
            return out

        cases["pysimdjson, lazy (fields read)"] = lazy
    return cases


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--objects", type=int, default=10_000, help="UnitSignals written to")
    ap.add_argument("--events", type=int, default=30_000, help="MODIFIED lines per round")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--user-data", type=int, default=64, help="bytes of spec.userData")
    args = ap.parse_args(argv)
    header("decoders")
    shape = Shape(args.objects, 20, 50, args.user_data, 1)
    clock = FakeClock(time.time_ns() - 86_400 * NS, NS // 4)
    emu = KubeEmulator(seed=1, clock=clock)
    populate(emu, shape, clock)
    source = EventSource([orjson.dumps(o) for o in emu.store.objects.values()],
                         emu.resource_version, 5)  # fmt: skip
    lines = source.lines(args.events)
    mean = sum(map(len, lines)) / len(lines)
    runnable = {n: f for n, f in decoders().items() if callable(f)}

    def case(fn: Callable[[bytes], Any]) -> Callable[[], float]:
        def one() -> float:
            t = time.perf_counter()
            for line in lines:
                fn(line)
            return time.perf_counter() - t
        return one

    times = interleaved({n: case(f) for n, f in runnable.items()}, args.repeat)
    budget_us = 1e6 / TARGET_EVENTS_S
    print(f"\n{args.events:,} MODIFIED lines (mean {mean:,.0f} B) from {args.objects:,} "
          f"UnitSignals, best of {args.repeat}, interleaved; at {TARGET_EVENTS_S:,.0f} events/s "
          f"an event has {budget_us:.0f} µs")
    rows = [["decoder", "µs a line (best)", "lines/s", f"left of {budget_us:.0f} µs for the rest"]]
    for name, f in decoders().items():
        if not callable(f):
            rows.append([name, f, "", ""])
            continue
        us = min(times[name]) / args.events * 1e6
        rows.append([name, f"{us:.2f}", f"{1e6 / us:,.0f}", f"{budget_us - us:.2f} µs"])
    print(table(rows))


if __name__ == "__main__":
    main()
