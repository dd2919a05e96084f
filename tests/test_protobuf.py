"""The protobuf exposition, decoded by the official protobuf runtime: the same samples as the text
exposition over random registries and random change/scrape sequences; native buckets as
Prometheus defines them; content negotiation as Prometheus 2.42 asks."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter import vocabulary
from exporter.catalog import Kind, Metric
from exporter.model.unitsignals import SignalState
from exporter.sinks.metrics import protobuf
from exporter.sinks.metrics.exposition import Format, negotiate, render_bytes
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.native import NativeBuckets, NativeConfig
from exporter.sinks.metrics.series import escape_label_value, format_value
from exporter.sinks.metrics.table import CHUNK, Column, RowTable
from exporter.sinks.metrics.unitsignals import UnitSignalMetrics
from tests import pbdecode

# What Prometheus 2.42 sends (scrape/scrape.go), without and with its native-histograms feature.
ACCEPT_TEXT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
               "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
ACCEPT_PROTO = ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                "encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,"
                "application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;"
                "q=0.5,*/*;q=0.1")


def test_negotiation_follows_prometheus_accept_headers():
    assert negotiate(ACCEPT_PROTO) is Format.PROTOBUF
    assert negotiate(ACCEPT_TEXT) is Format.OPENMETRICS
    assert negotiate("text/plain;version=0.0.4") is Format.TEXT
    assert negotiate(None) is Format.TEXT
    # Only delimited MetricFamily messages: other protobuf flavours fall back.
    assert negotiate("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                     "encoding=text,text/plain;q=0.5") is Format.TEXT
    assert negotiate("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                     "encoding=delimited;q=0.2,text/plain;q=0.5") is Format.TEXT


def text_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for f in parse_text(text):
        for s in f.samples:
            labels = dict(s.labels)
            if "le" in labels:
                labels["le"] = repr(float(labels["le"]))
            out[(s.name, tuple(sorted(labels.items())))] = s.value
    return out


def same(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    return all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


# A few values that recur (so series are changed and removed again) and any text at all.
label_value = st.one_of(st.sampled_from(["a", "b", 'q"uote', "back\\slash", "new\nline", "ü",
                                         ",x", "x="]),
                        st.text(st.characters(codec="utf-8"), max_size=12))
value = st.one_of(st.integers(-(10**6), 10**12).map(float),
                  st.floats(allow_nan=True, allow_infinity=True, width=64))
ns = st.integers(0, 4000 * 10**9)


@st.composite
def registries(draw: st.DrawFn) -> tuple[Registry, list, RowTable]:
    """Counters, gauges, infos and histograms (classic + native, random schema and limit) with
    random label values, plus a per-object table whose rows carry escaped label values."""
    kinds = draw(st.lists(st.sampled_from(list(Kind)), min_size=1, max_size=6))
    metrics = []
    for i, kind in enumerate(kinds):
        name = f"t{i}_{kind.value}" + ("_total" if kind is Kind.COUNTER else
                                        "_info" if kind is Kind.INFO else "")
        labels = tuple(f"l{j}" for j in range(draw(st.integers(0, 2))))
        buckets = tuple(sorted(set(draw(st.lists(st.integers(1, 10**5), min_size=1,
                                                  max_size=5))))) if kind is Kind.HISTOGRAM else ()
        metrics.append(Metric(name, kind, draw(st.text(max_size=20)), labels,
                              tuple(b / 100 for b in buckets)))
    metrics.append(Metric("t_obj_value", Kind.GAUGE, "Per object.", ("o",), per_object=True))
    native = draw(st.one_of(st.none(), st.builds(NativeConfig, st.integers(-4, 8),
                                                 st.integers(0, 20))))
    reg = Registry(metrics, native=native)
    tab = reg.table("t_obj_value")
    # A plain gauge column (the UnitSignal columns' renderers are tested below).
    # A row's state: (its label value, its value); the block is made from the label value.
    table = RowTable([Column(
        tab, lambda rows: "".join(f"{tab.prefix}{b}}} {format_value(s[1])}\n" for b, s in rows),
        pb=lambda rows, labels: protobuf.metric_fields(
            [lab + protobuf.gauge_value(s[1]) for lab, (_, s) in zip(labels, rows,
                                                                     strict=True)]))],
        lambda keys, states: [f'{{o="{escape_label_value(s[0])}"' for s in states])
    return reg, metrics, table


def apply(draw: st.DrawFn, reg: Registry, metrics: list[Metric], table: RowTable) -> None:
    """A random batch of changes: new series, increments, sets, observations, removals, rows."""
    for _ in range(draw(st.integers(0, 12))):
        m = draw(st.sampled_from(metrics))
        if m.per_object:
            key = draw(st.integers(0, 20))
            if draw(st.booleans()):
                table.put(key, (draw(label_value), draw(value)))
            else:
                table.remove(key)
            continue
        fam = reg[m.name]
        if draw(st.integers(0, 6)) == 0:
            # Part of the first protobuf form built ahead (pbprime), then more changes.
            fam.pb_prime(draw(st.integers(1, 3)))
            if draw(st.booleans()):
                table.pb_prime(draw(st.integers(1, 2)))
            continue
        if fam.series and draw(st.integers(0, 4)) == 0:
            fam.remove(*draw(st.sampled_from(sorted(fam.series))))
            continue
        vals = tuple(draw(label_value) for _ in m.labels)
        s = fam.labels(*vals)
        if m.kind is Kind.HISTOGRAM:
            for x in draw(st.lists(ns, max_size=5)):
                s.observe_ns(x)  # type: ignore[union-attr]
        elif m.kind is Kind.COUNTER:
            s.inc(draw(st.integers(0, 1000)))  # type: ignore[union-attr]
        else:
            s.set(draw(value))  # type: ignore[union-attr]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_protobuf_decodes_into_the_text_samples_through_changes(data):
    reg, metrics, table = data.draw(registries())
    for _ in range(data.draw(st.integers(1, 5))):
        apply(data.draw, reg, metrics, table)
        # Scrapes in either order or alone: each format's change-only cache must follow.
        order = data.draw(st.sampled_from(["tp", "pt", "p", "t"]))
        got = {}
        for fmt in order:
            if fmt == "t":
                got["t"] = text_samples(render_bytes(reg).decode())
            else:
                got["p"] = pbdecode.samples(render_bytes(reg, Format.PROTOBUF))
        fresh_text = text_samples(render_bytes(reg).decode())
        fresh_pb = pbdecode.samples(render_bytes(reg, Format.PROTOBUF))
        assert same(fresh_pb, fresh_text)
        for v in got.values():
            assert same(v, fresh_text)
    # Families: names, help and types as the catalog says, only those with series.
    by_name = {m.name: m for m in metrics}
    want_type = {Kind.COUNTER: 0, Kind.GAUGE: 1, Kind.INFO: 1, Kind.HISTOGRAM: 4}
    for mf in pbdecode.families(render_bytes(reg, Format.PROTOBUF)):
        assert mf.help == by_name[mf.name].help
        assert mf.type == want_type[by_name[mf.name].kind]
        assert len(mf.metric) > 0


@st.composite
def signal_state(draw: st.DrawFn, workload: str) -> SignalState:
    small = st.integers(0, 3)
    return SignalState(
        workload=workload, unit_id=draw(label_value), key=draw(label_value),
        agent_version=draw(label_value),
        labels=tuple(draw(st.lists(st.tuples(st.sampled_from(["team", "app.kubernetes.io/x"]),
                                             label_value), max_size=2, unique_by=lambda t: t[0]))),
        generation_lag=draw(st.integers(0, 10**6)),
        pending_since=draw(st.one_of(st.none(), st.floats(0, 2000, allow_nan=False))),
        ready=draw(small), accepting=draw(small),
        activity=draw(st.sampled_from(vocabulary.ACTIVITIES)),
        draining=draw(st.sampled_from((*vocabulary.DRAIN_REASONS, "none"))),
        allocation_pending=draw(small), status_seq=draw(st.integers(0, 10**9)),
        spec_valid=draw(small), status_valid=draw(small), stuck_invalid_spec=draw(small),
        phase=draw(st.sampled_from(vocabulary.PHASES)), phase_since=0.0,
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_unitsignal_tables_protobuf_decodes_into_the_text_samples(data):
    """The per-object tables' own protobuf renderers (no text in between): the same samples as
    the text, through puts, updates, removals, workload moves, primed slices and scrapes of
    either format in any order; rows span several chunks, live ages included."""
    now = [1000.0]
    reg = Registry(native=None)
    sink = UnitSignalMetrics(reg, clock=lambda: now[0])
    assert sink.rows is not None
    states: dict[tuple[str, str], SignalState] = {}
    keys = st.tuples(st.sampled_from(["ns", 'q"ns']),
                     st.one_of(st.integers(0, 3 * CHUNK).map(lambda i: f"us-{i}"), label_value))
    for _ in range(data.draw(st.integers(1, 4))):
        for _ in range(data.draw(st.integers(0, 3 * CHUNK))):
            key = data.draw(keys)
            old = states.get(key)
            if old is not None and data.draw(st.integers(0, 4)) == 0:
                sink.state(key, old, None)
                del states[key]
                continue
            workload = data.draw(st.sampled_from(["wl", "wl-2", "w\\l"]))
            new = data.draw(signal_state(workload))
            sink.state(key, old, new)
            states[key] = new
        if data.draw(st.booleans()):
            sink.rows.pb_prime(data.draw(st.integers(1, 3)))
        now[0] += data.draw(st.sampled_from([0.0, 1.5]))
        for fmt in data.draw(st.sampled_from(["tp", "pt", "p", "t"])):
            if fmt == "t":
                got = text_samples(render_bytes(reg).decode())
            else:
                got = pbdecode.samples(render_bytes(reg, Format.PROTOBUF))
            assert same(got, text_samples(render_bytes(reg).decode()))
        assert same(pbdecode.samples(render_bytes(reg, Format.PROTOBUF)),
                    text_samples(render_bytes(reg).decode()))
    # Every row is there: one ready series per UnitSignal.
    text = text_samples(render_bytes(reg).decode())
    ready = [k for k in text if k[0] == "zaroz_unitsignal_ready"]
    assert len(ready) == len(states)


def expected_native(values_ns: list[int], schema: int) -> dict[float, int]:
    """Native buckets computed independently: bucket i holds (base^(i-1), base^i]."""
    out: dict[float, int] = {}
    for x in values_ns:
        v = x / 1e9
        if v == 0:
            continue
        i = math.ceil(math.log2(v) * 2**schema - 1e-9)
        ub = 2.0 ** (i * 2.0**-schema)
        out[ub] = out.get(ub, 0) + 1
    return out


@settings(max_examples=80, deadline=None)
@given(st.lists(ns, max_size=40), st.integers(-4, 8))
def test_native_buckets_match_the_schema_definition(values, schema):
    reg = Registry([Metric("t_seconds", Kind.HISTOGRAM, "T.", (), (1.0,))],
                   native=NativeConfig(schema, 0))
    s = reg["t_seconds"].labels()
    for x in values:
        s.observe_ns(x)
    (mf,) = pbdecode.families(render_bytes(reg, Format.PROTOBUF))
    h = mf.metric[0].histogram
    assert h.schema == schema
    assert h.zero_count == sum(1 for x in values if x == 0)
    got = pbdecode.native_buckets(h)
    want = expected_native(values, schema)
    assert sorted(got) == pytest.approx(sorted(want), rel=1e-12)
    assert [got[k] for k in sorted(got)] == [want[k] for k in sorted(want)]
    assert h.sample_count == len(values)
    assert h.zero_count + sum(got.values()) == len(values)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 10**13), min_size=1, max_size=300), st.integers(0, 8),
       st.integers(1, 30))
def test_limit_reduces_resolution_and_keeps_every_count(values, schema, limit):
    limited = NativeBuckets(NativeConfig(schema, limit))
    for x in values:
        limited.observe_ns(x)
    assert len(limited.buckets) <= limit or limited.schema == -4
    assert sum(limited.buckets.values()) == len(values)
    # Exactly what an unlimited histogram at the reduced schema holds: merging is exact.
    assert limited.buckets == expected_index(values, limited.schema)
    # Plain data round trip (the checkpoint's): ints only, same buckets after restore.
    state = limited.state()
    assert all(isinstance(v, int) or all(isinstance(x, int) for x in v) for v in state.values())
    back = NativeBuckets(NativeConfig(schema, limit))
    back.restore(state)
    assert (back.schema, back.buckets, back.zero_count) == (limited.schema, limited.buckets, 0)


def expected_index(values_ns: list[int], schema: int) -> dict[int, int]:
    """Bucket index -> count by the schema's definition (as expected_native), not by the code
    under test: index i holds (2^((i-1)/2^schema), 2^(i/2^schema)]."""
    out: dict[int, int] = {}
    for x in values_ns:
        if x:
            i = math.ceil(math.log2(x / 1e9) * 2**schema - 1e-9)
            out[i] = out.get(i, 0) + 1
    return out


def test_restore_at_a_finer_schema_is_reduced_to_the_configured_one():
    fine = NativeBuckets(NativeConfig(6, 0))
    for x in range(1, 2000):
        fine.observe_ns(x * 7_000_000)
    coarse = NativeBuckets(NativeConfig(2, 0))
    coarse.restore(fine.state())
    assert coarse.schema == 2
    assert coarse.buckets == expected_index([x * 7_000_000 for x in range(1, 2000)], 2)
    with pytest.raises(ValueError):
        coarse.restore({"schema": 3, "zero_count": 0, "index": [1], "count": []})


def test_a_histogram_without_observations_is_native_and_classic_only_without_config():
    native = Registry([Metric("t_seconds", Kind.HISTOGRAM, "T.", (), (1.0,))])
    native["t_seconds"].labels()
    (mf,) = pbdecode.families(render_bytes(native, Format.PROTOBUF))
    h = mf.metric[0].histogram
    # A zero threshold above 0 marks it native for Prometheus even before any observation.
    assert h.HasField("schema") and h.zero_threshold > 0
    classic = Registry([Metric("t_seconds", Kind.HISTOGRAM, "T.", (), (1.0,))], native=None)
    classic["t_seconds"].labels().observe(0.5)
    (mf,) = pbdecode.families(render_bytes(classic, Format.PROTOBUF))
    h = mf.metric[0].histogram
    assert not h.HasField("schema") and not h.positive_span
    assert [(b.upper_bound, b.cumulative_count) for b in h.bucket] == [(1.0, 1)]


def test_exemplars_ride_on_classic_buckets():
    reg = Registry([Metric("t_seconds", Kind.HISTOGRAM, "T.", ("workload",), (1.0, 5.0))])
    s = reg["t_seconds"].labels("w")
    s.observe_exemplar(2_500_000_000, "w", "u-1", "2024-05-01T10:00:00.25Z")
    (mf,) = pbdecode.families(render_bytes(reg, Format.PROTOBUF))
    b = mf.metric[0].histogram.bucket
    assert not b[0].HasField("exemplar")
    ex = b[1].exemplar
    assert ex.value == 2.5
    assert ex.label[0].name == "trace_id" and len(ex.label[0].value) == 32
    assert (ex.timestamp.seconds, ex.timestamp.nanos) == (1714557600, 250_000_000)


@pytest.mark.parametrize(("at", "want"), [
    ("2024-05-01T10:00:00.25Z", (1714557600, 250_000_000)),
    ("2024-05-01T10:00:00Z", (1714557600, 0)),
    ("2024-05-01T12:00:00.123456789+02:00", (1714557600, 123_456_789)),
    ("2024-05-01T10:00:00.1234567891Z", (1714557600, 123_456_789)),  # ns: the rest cut
    ("not a time", None),
    ("", None),
])
def test_exemplar_timestamps_agree_in_openmetrics_and_protobuf(at, want):
    """Both formats take the exemplar's time from series.exemplar_time: exact, and none at all
    when occurred_at is unusable."""
    from exporter.sinks.metrics.exposition import render as render_chunks

    reg = Registry([Metric("t_seconds", Kind.HISTOGRAM, "T.", ("workload",), (1.0, 5.0))])
    reg["t_seconds"].labels("w").observe_exemplar(2_500_000_000, "w", "u-1", at)
    (mf,) = pbdecode.families(render_bytes(reg, Format.PROTOBUF))
    ex = mf.metric[0].histogram.bucket[1].exemplar
    assert ex.value == 2.5
    pb = (ex.timestamp.seconds, ex.timestamp.nanos) if ex.HasField("timestamp") else None
    om = b"".join(render_chunks(reg, Format.OPENMETRICS)).decode()
    (line,) = [ln for ln in om.splitlines() if 'le="5"' in ln]
    tail = line.split(" # ", 1)[1].split()
    text = tuple(map(int, tail[2].split("."))) if len(tail) == 3 else None
    assert pb == want
    assert text == want


async def test_server_serves_protobuf_when_asked_gzipped_or_not():
    from aiohttp.test_utils import TestClient, TestServer

    from exporter.web.app import MetricsServer
    from exporter.wiring.events import Pipeline

    pipeline = Pipeline()
    pipeline.registry["zaroz_unit_ready_seconds"].labels("w").observe(1.5)
    client = TestClient(TestServer(MetricsServer(pipeline.registry, standard_metrics=True).app))
    await client.start_server()
    try:
        for gz in ("identity", "gzip"):
            r = await client.get("/metrics", headers={"Accept": ACCEPT_PROTO,
                                                      "Accept-Encoding": gz})
            assert r.headers["Content-Type"] == protobuf.PROTOBUF_TYPE
            body = await r.read()  # aiohttp undoes the gzip
            fams = {mf.name: mf for mf in pbdecode.families(body)}
            h = fams["zaroz_unit_ready_seconds"].metric[0].histogram
            assert (h.sample_count, h.schema, pbdecode.native_buckets(h)) == (
                1, 3, {2.0 ** (5 / 8): 1})
            r = await client.get("/metrics", headers={"Accept": ACCEPT_TEXT})
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
            text = await client.get("/metrics")
            got = text_samples((await text.read()).decode())
            # the server's own gauges (series, scrape bytes, durations, the process collectors)
            # are set after or at each scrape: the same series, values compared for the rest
            pb = pbdecode.samples(body)
            moving = ("zaroz_exporter_last_scrape", "zaroz_exporter_series",
                      "zaroz_exporter_source_", "process_", "python_gc_")
            assert {k for k in got if k[0].startswith(("process_", "python_"))} == \
                {k for k in pb if k[0].startswith(("process_", "python_"))} != set()
            keep = {k for k in got if not k[0].startswith(moving)}
            diff = {k: (pb.get(k), got[k]) for k in keep if pb.get(k) != got[k]}
            assert same({k: pb[k] for k in keep}, {k: got[k] for k in keep}), diff
    finally:
        await client.close()


def test_native_flags_env_vars_and_mistakes(monkeypatch, capsys):
    from exporter.cli import build_parser
    from exporter.commands.config import native_config

    args = build_parser().parse_args(["serve"])
    assert native_config(args) == NativeConfig(3, 160)
    args = build_parser().parse_args(["serve", "--native-histogram-schema", "-2",
                                      "--native-histogram-max-buckets", "0"])
    assert native_config(args) == NativeConfig(-2, 0)
    assert native_config(build_parser().parse_args(
        ["demo", "--native-histogram-schema", "off"])) is None
    monkeypatch.setenv("ZAROZ_EXPORTER_NATIVE_HISTOGRAM_SCHEMA", "5")
    assert native_config(build_parser().parse_args(["serve"])).schema == 5
    for bad in (["--native-histogram-schema", "9"], ["--native-histogram-max-buckets", "-1"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", *bad])
        assert bad[0] in capsys.readouterr().err
    monkeypatch.setenv("ZAROZ_EXPORTER_NATIVE_HISTOGRAM_SCHEMA", "fine")
    from exporter.cli import main

    assert main(["serve"]) == 2  # one line naming the variable and the flag
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "ZAROZ_EXPORTER_NATIVE_HISTOGRAM_SCHEMA" in err
    assert "--native-histogram-schema" in err and "-4..8" in err
    assert err.count("'fine'") == 1  # the value said once


def test_native_state_round_trips_through_a_series_after_a_scrape():
    """The checkpoint's hook: native buckets out as plain data, back into a series that was
    already scraped, and the next protobuf scrape shows them."""
    metric = Metric("t_seconds", Kind.HISTOGRAM, "T.", (), (1.0,))
    old = Registry([metric], native=NativeConfig(4, 0))
    for x in (1, 10**9, 3 * 10**9, 7 * 10**9):
        old["t_seconds"].labels().observe_ns(x)
    state = old["t_seconds"].labels().native_state()  # type: ignore[union-attr]
    assert state is not None and isinstance(state["schema"], int)
    new = Registry([metric], native=NativeConfig(4, 0))
    s = new["t_seconds"].labels()
    render_bytes(new, Format.PROTOBUF)  # scraped before the restore
    s.restore_native(state)  # type: ignore[union-attr]
    (was,) = pbdecode.families(render_bytes(old, Format.PROTOBUF))
    (now,) = pbdecode.families(render_bytes(new, Format.PROTOBUF))
    assert pbdecode.native_buckets(now.metric[0].histogram) == \
        pbdecode.native_buckets(was.metric[0].histogram) != {}
    assert Registry([metric], native=None)["t_seconds"].labels().native_state() is None


def test_a_callback_only_family_keeps_no_growing_protobuf_change_list():
    """Text scrapes after one protobuf scrape: the change list of a family of callbacks (no
    dirty series ever) is bounded, and a later protobuf scrape still shows every value."""
    reg = Registry((Metric("t_cb", Kind.GAUGE, "values read at scrape", ("k",)),))
    fam = reg.gauge("t_cb")
    tick = [0]
    for i in range(100):
        fam.callback((str(i),), lambda i=i: tick[0] + i)
    render_bytes(reg, Format.PROTOBUF)  # the protobuf form is kept from here on
    for t in range(50):
        tick[0] = t + 1  # every callback's value moves at every text scrape
        render_bytes(reg)
    assert len(fam._pb_changed) <= len(fam.series)
    tick[0] = 1000
    assert same(pbdecode.samples(render_bytes(reg, Format.PROTOBUF)),
                text_samples(render_bytes(reg).decode()))


def test_a_native_state_this_version_cannot_read_restarts_only_the_native_buckets():
    """A checkpoint's native part in an unknown form: the family is reported skipped, its
    classic counts continue, and the native buckets start empty (not an unreadable checkpoint)."""
    from exporter.sinks.metrics.state import metric_state, restore_metrics

    metric = Metric("t_seconds", Kind.HISTOGRAM, "T.", (), (1.0,))
    old = Registry([metric], native=NativeConfig(4, 0))
    for x in (1, 10**9, 3 * 10**9):
        old.histogram("t_seconds").labels().observe_ns(x)
    state = metric_state(old)
    state["t_seconds"][0][-1] = {"schema": "four", "zero_count": 0, "index": [], "count": []}
    new = Registry([metric], native=NativeConfig(4, 0))
    assert restore_metrics(new, state) == ["t_seconds"]
    s = new.histogram("t_seconds").labels()
    assert (s.count, list(s.counts)) == (3, [2, 1])
    assert s.native is not None and s.native.buckets == {}
