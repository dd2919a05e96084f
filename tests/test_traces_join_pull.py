"""The trace builder reads the cluster join once per trace (when it opens or is restored), not
on every event; what changes later reaches the open trace by the join's push. So the spans are
the same as with a lookup per event, and the lookups count traces, not events."""

from __future__ import annotations

from exporter.sinks.metrics.family import Registry
from exporter.sinks.traces.builder import SpanRecord, TraceBuilder
from exporter.wiring.unitsignals import build_cluster
from tests.test_traces_join import Builders
from tests.unitsignals import T0, iso, status, unitsignal

WL = "wl-1"
CYCLE = ("unit.allocated", "unit.allocation_delivered", "unit.busy", "unit.idle")


def counted(b: TraceBuilder) -> list[int]:
    """Counts the builder's reads of the join."""
    calls = [0]
    read = b.context
    assert read is not None

    def counting(uid: str):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return read(uid)

    b.context = counting
    return calls


def feed(b: TraceBuilder, uid: str, types: list[str], t: float) -> float:
    for type_ in types:
        t += 0.01
        b(uid, type_, iso(t), {}, uid)
    return t


def relabelled(name: str, team: str, **kw):  # type: ignore[no-untyped-def]
    obj = unitsignal(name, **kw)
    obj["metadata"]["labels"]["team"] = team
    return obj


def team_of(r: SpanRecord) -> object:
    return r.attributes.get("zaroz.unitsignal.label.team")


def test_lookups_are_one_per_trace_however_many_events():
    sink = Builders()
    model, _ = build_cluster(Registry(), ["team"], traces=sink)
    units = [f"u{i}" for i in range(20)]
    for name in units[:10]:  # half of the UnitSignals before their units' first event
        model.upsert(unitsignal(name, status_=status()), T0)
    b = sink.builder(WL)
    calls = counted(b)
    t = T0 + 1
    for name in units:
        t = feed(b, f"unit-{name}", ["unit.created", "unit.ready"], t)
    for name in units[10:]:  # the other half after: pushed to the open traces
        model.upsert(unitsignal(name, status_=status()), t)
    for _ in range(25):
        for name in units:
            t = feed(b, f"unit-{name}", list(CYCLE), t)
    for name in units:
        t = feed(b, f"unit-{name}", ["unit.destroyed"], t)
    events = 20 * (2 + 25 * len(CYCLE) + 1)
    assert calls[0] == len(units) < events // 50  # one per trace opened
    # and every span of every unit carries its UnitSignal, whichever side came first
    late = {f"unit-{n}" for n in units[10:]}
    for r in sink.out:
        if r.attributes["zaroz.unit.id"] in late and r.name == "starting":
            assert team_of(r) is None  # it ended before the cluster knew the unit
        else:
            assert team_of(r) == "blue", r
    assert sum(1 for r in sink.out if r.name == "allocation") == 20 * 25


def test_a_change_of_the_join_after_the_trace_opened_reaches_its_next_spans():
    sink = Builders()
    model, _ = build_cluster(Registry(), ["team"], traces=sink)
    model.upsert(unitsignal(status_=status()), T0)
    b = sink.builder(WL)
    calls = counted(b)
    t = feed(b, "unit-u1", ["unit.created", "unit.ready", *CYCLE], T0 + 1)
    model.upsert(relabelled("u1", "red", status_=status(seq=2)), t)  # the labels change
    gen2 = relabelled("u1", "red", generation=2, status_=status(seq=3))
    gen2["metadata"]["generation"] = 2
    model.upsert(gen2, t + 0.001)  # and a new generation is written
    t = feed(b, "unit-u1", [*CYCLE, "unit.destroyed"], t + 0.002)
    assert calls[0] == 1
    allocs = [r for r in sink.out if r.name == "allocation"]
    assert [team_of(r) for r in allocs] == ["blue", "red"]
    root = sink.out[-1]
    assert root.name == "unit" and team_of(root) == "red"
    # (generation 1 was observed when the watch first showed it: no event of its own)
    assert [(n, a["zaroz.generation"]) for n, _, a in root.events
            if n.startswith("generation")] == [("generation_written", 2)]


def test_a_restored_trace_reads_what_the_join_knows_now():
    """The checkpoint's traces replace the open ones after the join may have pushed to them:
    each restored trace reads the join once, so it has the UnitSignal as the cluster has it."""
    first = Builders()
    model, _ = build_cluster(Registry(), ["team"], traces=first)
    model.upsert(unitsignal(status_=status()), T0)  # team=blue when the checkpoint is taken
    t = feed(first.builder(WL), "unit-u1", ["unit.created", "unit.ready", "unit.busy"], T0 + 1)
    saved = first.builder(WL).state()

    after = Builders()
    model2, _ = build_cluster(Registry(), ["team"], traces=after)
    model2.upsert(relabelled("u1", "red", status_=status()), t)  # relisted: now team=red
    gen2 = relabelled("u1", "red", generation=2, status_=None)
    gen2["metadata"]["generation"] = 2
    b = after.builder(WL)
    calls = counted(b)
    model2.upsert(gen2, t + 0.5)  # no trace open yet: the event waits in the join
    b.restore(saved)
    assert calls[0] == 1
    feed(b, "unit-u1", ["unit.idle", "unit.destroyed"], t + 1)
    assert calls[0] == 1
    busy, root = after.out
    assert (busy.name, team_of(busy)) == ("busy", "red")
    assert (root.name, team_of(root)) == ("unit", "red")
    assert ("generation_written", 2) in [(n, a["zaroz.generation"]) for n, _, a in root.events]
