"""The event log's traces joined with the cluster: UnitSignal attributes on a unit's spans, its
generations as root span events, bounded memory, and never `spec.userData`; in process, then
`serve` wired as the demo is (simulated route, Kubernetes emulator, cluster mirror)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.demo import demo_serve_args
from exporter.commands.serve import start
from exporter.sinks.metrics.family import Registry
from exporter.sinks.traces.builder import SpanRecord, TraceBuilder
from exporter.sinks.traces.join import ClusterJoin
from exporter.timestamps import parse_rfc3339_ns
from exporter.wiring.unitsignals import build_cluster
from tests.otlp_receiver import OtlpReceiver
from tests.unitsignals import T0, iso, status, unitsignal
from tests.waiting import until
from zaroz_sim.cluster import ClusterMirror
from zaroz_sim.config import LogNormal, SimConfig
from zaroz_sim.kube.emulator import KubeEmulator
from zaroz_sim.route import LiveFeed, RouteServer

WL = "wl-1"
SECRET = "customer-secret-value"  # the userData of tests.unitsignals objects
NS = 10**9
ATTRS = {"k8s.namespace.name": "team-a", "zaroz.unitsignal.name": "u1",
         "zaroz.unitsignal.label.team": "blue"}
LOG_ATTRS = {"zaroz.workload", "zaroz.unit.id", "zaroz.unit.key", "zaroz.destroy.reason"}


class Builders:
    """The part of TraceSink the join uses: one TraceBuilder per workload, spans to a list."""

    def __init__(self) -> None:
        self.out: list[SpanRecord] = []
        self.builders: dict[str, TraceBuilder] = {}

    def builder(self, workload: str) -> TraceBuilder:
        b = self.builders.get(workload)
        if b is None:
            b = self.builders[workload] = TraceBuilder(workload, self.out.append)
        return b


def log_event(sink: Builders, type_: str, at: float, uid: str = "unit-u1") -> None:
    sink.builder(WL)(uid, type_, iso(at), {}, "u1")


def run(cluster_first: bool) -> tuple[list[SpanRecord], Any]:
    sink = Builders()
    model, _ = build_cluster(Registry(), ["team"], traces=sink)
    first = unitsignal(generation=1, status_=None)
    if cluster_first:
        model.upsert(first, T0 + 0.5)  # generation 1 written, before the log's unit.created
        log_event(sink, "unit.created", T0 + 1)
    else:
        log_event(sink, "unit.created", T0 + 1)
        model.upsert(first, T0 + 0.5)
    log_event(sink, "unit.starting", T0 + 2)
    model.upsert(unitsignal(generation=1, status_=status()), T0 + 3)  # observed 1
    log_event(sink, "unit.ready", T0 + 4)
    gen2 = unitsignal(generation=2, status_=status())
    gen2["metadata"]["generation"] = 2
    model.upsert(gen2, T0 + 5)
    gen2_seen = unitsignal(generation=2, status_=status(observedGeneration=2, seq=2))
    gen2_seen["metadata"]["generation"] = 2
    model.upsert(gen2_seen, T0 + 6)
    model.delete(gen2_seen, T0 + 7)  # deleted before the log says destroyed: attributes stay
    log_event(sink, "unit.destroyed", T0 + 8)
    return sink.out, model.tap


def test_spans_carry_the_unitsignal_and_its_generations_whichever_side_comes_first():
    for cluster_first in (True, False):
        out, join = run(cluster_first)
        starting, root = out
        assert (starting.name, root.name) == ("starting", "unit")
        for r in out:
            assert {k: v for k, v in r.attributes.items() if k not in LOG_ATTRS} == ATTRS
        assert [(n, t, a) for n, t, a in root.events] == [
            ("generation_written", int((T0 + 0.5) * NS), {"zaroz.generation": 1}),
            ("generation_observed", int((T0 + 3) * NS), {"zaroz.generation": 1}),
            ("generation_written", int((T0 + 5) * NS), {"zaroz.generation": 2}),
            ("generation_observed", int((T0 + 6) * NS), {"zaroz.generation": 2}),
        ], cluster_first
        assert root.start_ns == parse_rfc3339_ns(iso(T0 + 1))
        assert SECRET not in repr(out) and "userData" not in repr(out)
        assert len(join) == 1 and not join.live  # deleted: kept among the lingering only


def test_a_unit_of_another_workload_is_not_joined():
    sink = Builders()
    model, _ = build_cluster(Registry(), traces=sink)
    model.upsert(unitsignal(workload="wl-2", status_=status()), T0)
    log_event(sink, "unit.created", T0 + 1)
    log_event(sink, "unit.destroyed", T0 + 2)
    (_, root) = sink.out
    assert not any(k.startswith("k8s.") for r in sink.out for k in r.attributes)
    assert root.events == []


def test_the_join_is_bounded_by_the_objects_and_the_linger():
    sink = Builders()
    model, _ = build_cluster(Registry(), traces=sink)
    join: ClusterJoin = model.tap  # type: ignore[assignment]
    join.linger = 10
    objs = [unitsignal(f"u{i}", status_=None) for i in range(50)]
    for o in objs:
        model.upsert(o, T0)
    assert len(join.live) == 50 == len(model.objects)
    for o in objs:
        model.delete(o, T0 + 1)
    assert not join.live and len(join.gone) == 10
    # Generation events of a unit whose trace never opens are capped too.
    for g in range(2, 100):
        join.generation(WL, "unit-x", "written", g, T0 + g)
    assert len(join.live[(WL, "unit-x")].waiting) == 16


# The demo's platform, faster: units live seconds, not minutes. Readiness stays above a second
# (the demo's median is 6 s): a span that ends before the watch delivered its UnitSignal cannot
# carry it, and the UnitSignal is written at unit.created.
FAST = replace(
    SimConfig(seed=3, workloads=2, arrival_rate=4.0),
    readiness=LogNormal(1.5, 0.2), lifetime=LogNormal(2.0, 0.3), drain=LogNormal(0.2, 0.3),
    allocation_gap=LogNormal(0.3, 0.5), session=LogNormal(0.2, 0.5),
)


class SecretMirror(ClusterMirror):
    """The demo's mirror, with a label to allowlist and customer data in every spec."""

    def __init__(self, kube: KubeEmulator) -> None:
        super().__init__(kube, seed=3)
        create = kube.create_object

        def create_with(ns: str, obj: dict[str, Any], **kw: Any) -> Any:
            meta = dict(obj["metadata"], labels=dict(obj["metadata"]["labels"], team="checkout"))
            spec = dict(obj["spec"], userData={"token": SECRET})
            return create(ns, dict(obj, metadata=meta, spec=spec), **kw)

        kube.create_object = create_with  # type: ignore[method-assign]


async def test_demo_spans_carry_namespace_name_and_generations_and_no_user_data():
    route = RouteServer(FAST.workload_list())
    kube = KubeEmulator(seed=3, bookmark_interval_s=10.0)
    mirror = SecretMirror(kube)
    route_url, kube_url = await route.start(), await kube.start()
    with OtlpReceiver() as rx:
        args = build_parser().parse_args(["demo", "--listen", "127.0.0.1:0", "--wait", "1",
                                          "--otlp-endpoint", rx.endpoint])
        args = demo_serve_args(args, route_url, kube_url)
        args.unitsignal_labels_allowlist = ["team"]
        running = await start(ServeConfig.from_args(args))
        try:
            await until(running.ready, timeout=10, interval=0.05)
            # Made now: its simulated time starts at its creation, so the first batch holds no
            # backlog (a unit created and ready in one batch is ready before any watch could
            # have shown its UnitSignal).
            feed = LiveFeed(route, FAST, listeners=[mirror.apply])
            feed.start()
            await asyncio.sleep(7)
            await feed.stop()
            # The tailer and the watch catch up and the roots are exported, however slowly a
            # busy machine runs them (a fixed pause could end first).
            await until(lambda: sum(1 for s in rx.spans if not s.parent_span_id) >= 10,
                        timeout=60, interval=0.1)
        finally:
            await running.stop()
            await route.stop()
            await kube.stop()
    roots = [s for s in rx.spans if not s.parent_span_id]
    assert len(roots) >= 10
    for root in roots:
        wl, key = root.attributes["zaroz.workload"], root.attributes["zaroz.unit.key"]
        assert root.attributes["k8s.namespace.name"] == f"zaroz-{wl}", root.attributes
        assert root.attributes["zaroz.unitsignal.name"] == key[:40]
        assert root.attributes["zaroz.unitsignal.label.team"] == "checkout"
        gens = [(n, a["zaroz.generation"]) for n, _, a in root.events if "generation" in n]
        assert ("generation_written", 1) in gens, root.events
    # Every unit that started was observed at generation 1 by its (simulated) agent.
    assert sum(1 for r in roots for n, _, a in r.events
               if n == "generation_observed") >= len(roots) // 2
    children = [s for s in rx.spans if s.parent_span_id]
    bare = [(s.name, s.attributes) for s in children if "k8s.namespace.name" not in s.attributes]
    assert children and not bare, bare
    for s in rx.spans:
        blob = repr((s.name, s.attributes, s.events, s.status_message, s.resource))
        assert SECRET not in blob and "userData" not in blob and "token" not in blob


def test_a_unitsignal_moved_to_another_workload_leaves_its_old_join_entry():
    sink = Builders()
    model, _ = build_cluster(Registry(), traces=sink)
    join: ClusterJoin = model.tap  # type: ignore[assignment]
    model.upsert(unitsignal(workload="wl-1", status_=status()), T0)
    moved = unitsignal(workload="wl-2", status_=status())
    model.upsert(moved, T0 + 1)
    assert list(join.live) == [("wl-2", "unit-u1")]  # not also the old ("wl-1", ...)
    assert ("wl-1", "unit-u1") in join.gone  # lingers, bounded, like a deleted one
    model.delete(moved, T0 + 2)
    assert not join.live
