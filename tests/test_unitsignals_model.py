"""UnitSignal measurements and state, through the model and the metrics sink."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.model.observations import Recorder
from exporter.model.unitsignals import UnitSignalModel
from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.metrics.family import Registry
from exporter.wiring.unitsignals import build_cluster
from tests.unitsignals import T0, iso, status, unitsignal


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def setup(allowlist=()):
    clock = Clock()
    reg = Registry()
    model, _ = build_cluster(reg, allowlist, clock)
    return model, reg, clock


def samples(reg: Registry) -> dict:
    out = {}
    text = render_bytes(reg).decode()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def per(name: str, obj="u1", ns="team-a", wl="wl-1", **extra) -> tuple:
    return (name, frozenset({"namespace": ns, "unitsignal": obj, "workload": wl, **extra}.items()))


def test_generation_lag_over_a_known_timeline():
    model, reg, clock = setup()
    model.upsert(unitsignal(generation=1, status_=status(observedGeneration=1)), T0)
    s = samples(reg)
    assert s[per("zaroz_unitsignal_generation_lag")] == 0
    assert s[per("zaroz_unitsignal_generation_lag_seconds")] == 0
    # Generation 2 and 3 appear; the agent is still on 1.
    model.upsert(unitsignal(generation=2, status_=status(observedGeneration=1)), T0 + 10)
    model.upsert(unitsignal(generation=3, status_=status(observedGeneration=1)), T0 + 15)
    clock.now = T0 + 40
    s = samples(reg)
    assert s[per("zaroz_unitsignal_generation_lag")] == 2
    assert s[per("zaroz_unitsignal_generation_lag_seconds")] == 30  # oldest waiting: gen 2
    clock.now = T0 + 50
    assert samples(reg)[per("zaroz_unitsignal_generation_lag_seconds")] == 40
    # The agent reaches 2: gen 3 is now the oldest waiting.
    model.upsert(unitsignal(generation=3, status_=status(observedGeneration=2)), T0 + 52)
    s = samples(reg)
    assert s[per("zaroz_unitsignal_generation_lag")] == 1
    assert s[per("zaroz_unitsignal_generation_lag_seconds")] == 35
    model.upsert(unitsignal(generation=3, status_=status(observedGeneration=3)), T0 + 60)
    s = samples(reg)
    assert s[per("zaroz_unitsignal_generation_lag")] == 0
    assert s[per("zaroz_unitsignal_generation_lag_seconds")] == 0
    wl = frozenset({("workload", "wl-1")})
    assert s[("zaroz_unitsignal_generation_observe_seconds_count", wl)] == 2
    assert s[("zaroz_unitsignal_generation_observe_seconds_sum", wl)] == pytest.approx(42 + 45)


def test_generation_waiting_at_first_sight_starts_at_the_spec_write():
    model, reg, _ = setup()
    obj = unitsignal(generation=4, status_=status(observedGeneration=3), spec_written=T0 - 120)
    model.replace([obj], T0)
    assert samples(reg)[per("zaroz_unitsignal_generation_lag_seconds")] == 120
    model.upsert(unitsignal(generation=4, status_=status(observedGeneration=4)), T0 + 5)
    s = samples(reg)
    assert s[("zaroz_unitsignal_generation_observe_seconds_sum",
              frozenset({("workload", "wl-1")}))] == 125


def test_missing_status_counts_as_nothing_observed():
    model, reg, clock = setup()
    model.upsert(unitsignal(generation=2, created=T0), T0 + 1)
    clock.now = T0 + 11
    s = samples(reg)
    assert s[per("zaroz_unitsignal_generation_lag")] == 2
    assert s[per("zaroz_unitsignal_generation_lag_seconds")] == 10
    assert s[per("zaroz_unitsignal_status_valid")] == 1


def test_a_status_written_away_counts_as_nothing_observed_again():
    model, reg, _ = setup()
    model.upsert(unitsignal(status_=status(accepting=True, seq=5)), T0)
    model.upsert(unitsignal(), T0 + 1)  # the same generation, the status gone
    s = samples(reg)
    assert s[per("zaroz_unitsignal_generation_lag")] == 1
    assert s[per("zaroz_unitsignal_accepting")] == 0
    assert s[per("zaroz_unitsignal_status_seq")] == 0
    assert s[per("zaroz_unitsignal_status_valid")] == 1


def test_invalid_spec_is_reported_and_its_generation_marked_stuck():
    model, reg, _ = setup()
    model.upsert(unitsignal(generation=1, status_=status(observedGeneration=1)), T0)
    bad = unitsignal(generation=2, status_=status(observedGeneration=1), key="Not A Key!")
    bad["metadata"]["generation"] = 2
    model.upsert(bad, T0 + 1)
    model.upsert(bad, T0 + 2)  # same spec again: counted once
    s = samples(reg)
    assert s[per("zaroz_unitsignal_spec_valid")] == 0
    assert s[per("zaroz_unitsignal_generation_stuck_invalid_spec")] == 1
    v = frozenset({("workload", "wl-1"), ("rule", "spec_schema")})
    assert s[("zaroz_unitsignal_conformance_violations_total", v)] == 1


@pytest.mark.parametrize(
    ("first", "second", "rule"),
    [
        (status(observedGeneration=2), status(observedGeneration=1, seq=2),
         "observed_generation_regressed"),
        (status(observedGeneration=1), status(observedGeneration=5, seq=2),
         "observed_generation_ahead"),
        (status(seq=9), status(seq=2), "agent_restart"),
        (status(), status(allocationAck="alloc-never", seq=2), "unknown_allocation_ack"),
        (status(), status(observedGeneration="one"), "status_schema"),
    ],
)
def test_conformance_rules(first, second, rule):
    model, reg, _ = setup()
    model.upsert(unitsignal(generation=2, status_=first), T0)
    model.upsert(unitsignal(generation=2, status_=second), T0 + 1)
    model.upsert(unitsignal(generation=2, status_=second), T0 + 2)
    s = samples(reg)
    for r in ("observed_generation_regressed", "observed_generation_ahead", "agent_restart",
              "unknown_allocation_ack", "status_schema", "spec_schema"):
        key = ("zaroz_unitsignal_conformance_violations_total",
               frozenset({("workload", "wl-1"), ("rule", r)}))
        assert s[key] == (1 if r == rule else 0), r


def test_readiness_on_the_cluster_clock_once_per_object():
    model, reg, _ = setup()
    model.upsert(unitsignal(created=T0, status_=status()), T0)
    ready = status(signalledReady=iso(T0 + 7.25), seq=2)
    model.upsert(unitsignal(created=T0, status_=ready), T0 + 8)
    model.upsert(unitsignal(created=T0, status_=dict(ready, seq=3)), T0 + 9)
    s = samples(reg)
    wl = frozenset({("workload", "wl-1")})
    assert s[("zaroz_unitsignal_ready_seconds_count", wl)] == 1
    assert s[("zaroz_unitsignal_ready_seconds_sum", wl)] == 7.25
    assert s[per("zaroz_unitsignal_ready")] == 1


def test_allocation_ack_from_allocated_at_to_the_ack():
    model, reg, _ = setup()
    model.upsert(unitsignal(status_=status()), T0)
    alloc = {"id": "a-1", "generation": 2, "allocatedAt": iso(T0 + 1)}
    model.upsert(unitsignal(generation=2, allocation=alloc, status_=status()), T0 + 1.01)
    s = samples(reg)
    assert s[per("zaroz_unitsignal_allocation_pending")] == 1
    model.upsert(unitsignal(generation=2, allocation=alloc,
                            status_=status(observedGeneration=2, allocationAck="a-1", seq=2)),
                 T0 + 1.5)
    s = samples(reg)
    wl = frozenset({("workload", "wl-1")})
    assert s[("zaroz_unitsignal_allocation_ack_seconds_count", wl)] == 1
    assert s[("zaroz_unitsignal_allocation_ack_seconds_sum", wl)] == pytest.approx(0.5)
    assert s[per("zaroz_unitsignal_allocation_pending")] == 0


def test_allocation_already_acknowledged_at_first_sight_is_not_measured():
    model, reg, _ = setup()
    alloc = {"id": "a-1", "generation": 2, "allocatedAt": iso(T0 - 100)}
    model.replace([unitsignal(generation=2, allocation=alloc,
                              status_=status(observedGeneration=2, allocationAck="a-1"))], T0)
    s = samples(reg)
    assert s.get(("zaroz_unitsignal_allocation_ack_seconds_count",
                  frozenset({("workload", "wl-1")})), 0) == 0


def test_state_series_and_phases():
    model, reg, clock = setup()
    model.upsert(unitsignal("a", status_=status()), T0)
    model.upsert(unitsignal("b", status_=status(signalledReady=iso(T0), accepting=True,
                                                activity="busy")), T0)
    model.upsert(unitsignal("c", draining="scale_down", status_=status()), T0)
    clock.now = T0 + 30
    s = samples(reg)
    assert s[per("zaroz_unitsignal_accepting", "b")] == 1
    assert s[per("zaroz_unitsignal_activity", "b", activity="busy")] == 1
    assert s[per("zaroz_unitsignal_activity", "a", activity="none")] == 1
    assert s[per("zaroz_unitsignal_draining", "c", reason="scale_down")] == 1
    assert s[per("zaroz_unitsignal_draining", "a", reason="none")] == 0
    assert s[per("zaroz_unitsignal_info", "a", unit_id="unit-a", key="a",
                 agent_version="1.4.2")] == 1
    phase = lambda p: frozenset({("workload", "wl-1"), ("phase", p)})  # noqa: E731
    assert s[("zaroz_workload_unitsignals", phase("starting"))] == 1
    assert s[("zaroz_workload_unitsignals", phase("ready"))] == 1
    assert s[("zaroz_workload_unitsignals", phase("draining"))] == 1
    assert s[("zaroz_workload_unitsignal_oldest_phase_seconds", phase("ready"))] == 30
    assert s[("zaroz_workload_unitsignal_oldest_phase_seconds", phase("allocated"))] == 0
    # The activity series follows the value, no stale series stays behind.
    model.upsert(unitsignal("b", status_=status(signalledReady=iso(T0), activity="idle")), T0)
    s = samples(reg)
    assert per("zaroz_unitsignal_activity", "b", activity="busy") not in s
    assert s[per("zaroz_unitsignal_activity", "b", activity="idle")] == 1


def test_per_object_series_go_with_the_object_and_on_relist():
    model, reg, _ = setup()
    model.upsert(unitsignal("a", status_=status()), T0)
    model.upsert(unitsignal("b", status_=status()), T0)
    model.delete(unitsignal("a"), T0 + 1)
    s = samples(reg)
    assert not [k for k in s if ("unitsignal", "a") in k[1]]
    model.replace([unitsignal("c", status_=status())], T0 + 2)  # b was deleted while away
    s = samples(reg)
    assert not [k for k in s if ("unitsignal", "b") in k[1]]
    assert s[per("zaroz_unitsignal_ready", "c")] == 0
    phase = frozenset({("workload", "wl-1"), ("phase", "starting")})
    assert s[("zaroz_workload_unitsignals", phase)] == 1


def test_recreated_object_with_a_new_uid_starts_over():
    model, reg, _ = setup()
    model.upsert(unitsignal(status_=status(seq=9)), T0)
    model.upsert(unitsignal(uid="other", status_=status(seq=1)), T0 + 1)
    s = samples(reg)
    rule = frozenset({("workload", "wl-1"), ("rule", "agent_restart")})
    assert s[("zaroz_unitsignal_conformance_violations_total", rule)] == 0


def test_workload_is_the_namespace_without_the_label():
    model, reg, _ = setup()
    model.upsert(unitsignal(workload=None, status_=status()), T0)
    assert samples(reg)[per("zaroz_unitsignal_ready", wl="team-a")] == 0


def test_labels_allowlist_and_no_user_data_anywhere():
    model, reg, _ = setup(allowlist=("team", "absent"))
    rec = Recorder()
    UnitSignalModel(rec).upsert(unitsignal(status_=status()), T0)
    model.upsert(unitsignal(status_=status()), T0)
    text = render_bytes(reg).decode()
    assert 'label_team="blue"' in text
    assert "customer-secret-value" not in text
    assert "customer-secret-value" not in repr(rec.calls)


def test_bad_objects_are_ignored_without_a_crash():
    model, reg, _ = setup()
    for bad in ({}, {"metadata": None}, {"metadata": {"name": "x"}}, [],
                {"metadata": {"name": "x", "namespace": "n"}, "spec": "oops", "status": 5}):
        model.upsert(bad, T0)  # type: ignore[arg-type]
    s = samples(reg)
    assert s[per("zaroz_unitsignal_spec_valid", "x", "n", "n")] == 0


def test_status_fields_deleted_by_a_merge_patch_count_as_null():
    model, reg, _ = setup()
    st = status()
    del st["signalledReady"], st["activity"]
    model.upsert(unitsignal(status_=st), T0)
    s = samples(reg)
    assert s[per("zaroz_unitsignal_status_valid")] == 1
    rule = frozenset({("workload", "wl-1"), ("rule", "status_schema")})
    assert s[("zaroz_unitsignal_conformance_violations_total", rule)] == 0


def test_a_namespace_relist_only_reconciles_its_namespace():
    model, _reg, _ = setup()
    model.upsert(unitsignal("a", "ns-1", status_=status()), T0)
    model.upsert(unitsignal("b", "ns-2", status_=status()), T0)
    model.replace([], T0 + 1, namespace="ns-1")
    assert set(model.objects) == {("ns-2", "b")}


def test_label_values_are_escaped_in_every_per_object_series():
    """The API server allows few characters in names and label values, but the exporter must
    stay valid exposition whatever the object holds (a quote, a backslash, a newline)."""
    model, reg, _ = setup(("team",))
    obj = unitsignal("u1", workload='w"l\\1', status_=status(agentVersion='1.4"2\n'))
    obj["metadata"]["labels"]["team"] = 'bl"ue'
    model.upsert(unitsignal("u0", status_=status()), T0)  # a plain row in the same chunk
    model.upsert(obj, T0)
    s = samples(reg)  # parsed by prometheus_client: invalid escaping fails here
    assert per("zaroz_unitsignal_ready", obj="u0") in s
    assert s[per("zaroz_unitsignal_ready", wl='w"l\\1')] == 0
    assert s[per("zaroz_unitsignal_info", wl='w"l\\1', unit_id="unit-u1", key="u1",
                 agent_version='1.4"2\n')] == 1
    assert s[per("zaroz_unitsignal_labels", wl='w"l\\1', label_team='bl"ue')] == 1


def test_list_page_returns_the_keys_the_reflector_would_have_read():
    """The cluster handler hands the reflector the keys of a LIST page (the model's own
    tuples): the same as object_key's for this shard's, another shard's and bad objects."""
    from exporter.sources.kube.handler import object_key
    from exporter.wiring.unitsignals import NamespaceHandler

    model, _, _ = setup()
    handler = NamespaceHandler(model, None, owns=lambda workload: workload != "wl-other")
    page = [unitsignal("u1"), unitsignal("u2", "team-b"), unitsignal("u3", workload="wl-other"),
            {}, {"metadata": {"name": "x"}}, {"metadata": {"name": "", "namespace": "n"}},
            {"metadata": {"name": "y", "namespace": "n"}, "spec": "oops"}]
    keys = handler.list_page(page, T0)  # type: ignore[arg-type]
    assert keys == [k for k in map(object_key, page) if k is not None]
    assert keys == [("team-a", "u1"), ("team-b", "u2"), ("team-a", "u3"), ("", "x"), ("n", "y")]
    assert ("team-a", "u3") not in model.objects  # another shard's
    assert keys[0] is next(iter(model.objects))  # shared, not a second tuple per object


def test_what_100k_objects_repeat_is_kept_once():
    """Memory at 100k objects: a team's allowlisted labels, the agent's version and activity,
    and an acknowledged allocation's id are one object each, not one copy per UnitSignal (each
    object arrives decoded with its own strings)."""
    import orjson

    model, _, _ = setup(("team",))
    alloc = {"id": "alloc-1", "generation": 1, "allocatedAt": iso(T0)}
    for name in ("u1", "u2"):
        obj = unitsignal(name, allocation=alloc, status_=status(
            agentVersion="1.5.0", activity="busy", allocationAck="alloc-1"))
        model.upsert(orjson.loads(orjson.dumps(obj)), T0 + 1)
    a, b = model.objects[("team-a", "u1")], model.objects[("team-a", "u2")]
    assert a.state is not None and b.state is not None
    assert a.state.labels == (("team", "blue"),) and a.state.labels is b.state.labels
    assert a.status_key is not None and b.status_key is not None
    assert a.status_key[1] == "1.5.0" and a.status_key[1] is b.status_key[1]  # agentVersion
    assert a.status_key[4] == "busy" and a.status_key[4] is b.status_key[4]  # activity
    assert a.status_key[7] == "alloc-1" and a.status_key[7] is a.alloc_id  # the spec's id
