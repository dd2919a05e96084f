"""What the watch line's decode would cost with other JSON decoders: evidence for a decision.

The cluster benchmark's watch target (100,000 events/s, 10 µs an event) sits below what
`orjson.loads` leaves: decoding a UnitSignal watch line takes ~6 µs of those 10 µs before the
model reads a field. This measures, on the same MODIFIED lines, what other decoders would leave
instead; they are imported only if installed. It was the evidence for adding msgspec:
the exporter now decodes typed as below (`exporter/sources/kube/typed.py`, with the status kept
raw too); pysimdjson is still not used:

- `orjson.loads`: today's decode, the whole object into dicts.
- `msgspec` untyped: the whole object into dicts, msgspec's parser.
- `msgspec` typed: only what the watch path reads: the metadata fields, the status as a dict;
  the spec and managedFields kept as `msgspec.Raw` (bytes, decoded only when the generation
  moves or on first sight), every other field skipped by the parser.
- `pysimdjson`: a lazy document, the same fields read out of it.

Then the other way to free the main process, with the project's own libraries: a second process
(the machine has two cores) that decodes each line, runs both schema checks and sends on only
what the model reads, as one small JSON document an event. What the main process would still
spend per event (decoding that document, `model.upsert` with the schema verdicts given) is
measured against today's `loads + model.upsert`, the same synced model taking turns; the
worker's own cost is measured apart. With the default 10,000 objects the main side's cache
misses are fewer than at 100,000: a lower bound.

    python -m bench.decoders [--objects N] [--events N] [--repeat K]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import Any

import orjson

from bench._common import header, interleaved, table
from bench.cluster import NS, EventSource, FakeClock, Shape, apply_lines, fresh_model, populate
from exporter import contract
from exporter.model import unitsignals
from exporter.model.unitsignals import STATUS_FIELDS, UnitSignalModel
from exporter.wiring.unitsignals import NamespaceHandler
from zaroz_sim.kube.emulator import KubeEmulator

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


# -- a decode worker ------------------------------------------------------------------------------

_META = ("name", "namespace", "uid", "resourceVersion", "generation", "labels",
         "creationTimestamp")  # fmt: skip
_NULLS = dict.fromkeys(STATUS_FIELDS)


def worker_side(line: bytes) -> bytes:
    """The worker's share of one event: decode, both schema checks, the fields the model reads
    (the spec whole: the model reads it when the generation moves) and their verdicts."""
    obj = orjson.loads(line)["object"]
    meta, spec, status = obj["metadata"], obj.get("spec"), obj.get("status")
    return orjson.dumps([
        {"metadata": {k: meta.get(k) for k in _META}, "spec": spec, "status": status},
        contract.is_valid_unit_signal_spec(spec),
        contract.is_valid_unit_signal_status(_NULLS | status if type(status) is dict else status),
    ])


def main_side(model: UnitSignalModel, sent: list[bytes]) -> None:
    """The main process's share: decode what the worker sent, apply it with its verdicts."""
    verdict = [True, True]
    upsert, loads, clock = model.upsert, orjson.loads, time.time
    checks = unitsignals.is_valid_unit_signal_spec, unitsignals.is_valid_unit_signal_status
    unitsignals.is_valid_unit_signal_spec = lambda _spec: verdict[0]
    unitsignals.is_valid_unit_signal_status = lambda _status: verdict[1]
    try:
        for doc in sent:
            obj, verdict[0], verdict[1] = loads(doc)
            upsert(obj, clock())
    finally:
        unitsignals.is_valid_unit_signal_spec, unitsignals.is_valid_unit_signal_status = checks


def split(emu: KubeEmulator, source: EventSource, events: int, repeat: int) -> None:
    _, model = fresh_model()
    gc.disable()  # synced as the reflector leaves it: listed with the collector paused, frozen
    NamespaceHandler(model, None).list_page(list(emu.store.objects.values()), time.time())
    gc.enable()
    gc.freeze()
    today, main_s, worker_s = "today: loads + model.upsert", "main, with a decode worker", \
        "the worker (decode, checks, send)"
    times: dict[str, list[float]] = {today: [], main_s: [], worker_s: []}
    for r in range(repeat):
        lines = {today: source.lines(events), main_s: source.lines(events)}
        t = time.perf_counter()
        sent = [worker_side(line) for line in lines[main_s]]
        times[worker_s].append(time.perf_counter() - t)
        cases = [(today, lambda ls=lines[today]: apply_lines(model, ls)),
                 (main_s, lambda s=sent: main_side(model, s))]
        for name, fn in cases[r % 2:] + cases[:r % 2]:
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    print(f"\na decode worker: {events:,} MODIFIED lines per case and round into one model of "
          f"{len(model.objects):,} objects, best of {repeat}, today's and the main side's in turn")
    rows = [["process", "µs an event (best)", "events/s"]]
    for name, ts in times.items():
        us = min(ts) / events * 1e6
        rows.append([name, f"{us:.2f}", f"{1e6 / us:,.0f}"])
    print(table(rows))


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
    split(emu, source, args.events, args.repeat)


if __name__ == "__main__":
    main()
