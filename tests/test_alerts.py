"""The alert generator: files current, names real, runbooks complete, thresholds on buckets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from alerts import alerting, cases, recording, render
from alerts.config import DEFAULT_CONFIG, NATIVE_CONFIG, SLO, Config
from exporter import catalog
from exporter.sinks.metrics.series import format_value
from tools import promql

ROOT = Path(__file__).resolve().parent.parent
RUNBOOKS = ROOT / "docs" / "runbooks.md"


def _rule_docs() -> list[dict[str, object]]:
    rules = []
    for name in render.RULE_FILES:
        doc = yaml.safe_load((render.RULES_DIR / name).read_text())
        for group in doc["groups"]:
            rules.extend(group["rules"])
    return rules


def test_generated_files_are_current() -> None:
    """Someone edited a generated YAML, or alerts/*.py without `python -m alerts`."""
    stale = [
        str(p.relative_to(ROOT))
        for p, text in render.all_files().items()
        if not p.exists() or p.read_text() != text
    ]
    assert not stale, f"run `python -m alerts`; stale: {stale}"
    expected = set(render.all_files())
    extra = {p for d in (render.RULES_DIR, render.NATIVE_RULES_DIR, render.TESTS_DIR,
                         render.NATIVE_TESTS_DIR, render.NATIVE_TEST_RULES_DIR)
             for p in d.glob("*.yaml")} - expected
    assert not extra, f"not generated, remove: {sorted(map(str, extra))}"


def test_every_expression_reads_catalog_metrics_or_recorded_names() -> None:
    known = catalog.sample_names() | recording.recording_names() | {"up"}
    for rule in _rule_docs():
        names = promql.metric_names(str(rule["expr"]))
        assert names, rule
        unknown = names - known
        assert not unknown, f"{rule.get('alert') or rule.get('record')}: {unknown}"


def test_recorded_names_follow_level_metric_operation() -> None:
    for rule in recording.recording_rules():
        level, metric, ops = rule.record.split(":")
        assert level and ops, rule.record
        base = metric.removesuffix("_count")
        assert any(base.startswith(m.family) for m in catalog.METRICS), rule.record


def test_recorded_names_do_not_depend_on_thresholds() -> None:
    """Dashboards import names; changing an SLO threshold must not rename anything."""
    a = {r.record for r in recording.recording_rules({"readiness": 30, "allocation_ack": 0.5})}
    assert a == {r.record for r in recording.recording_rules()} == recording.recording_names()


def test_headline_quantiles_recorded() -> None:
    names = recording.recording_names()
    for h in recording.QUANTILE_HISTOGRAMS:
        for q in ("p50", "p95", "p99"):
            assert recording.quantile_name(h, q) in names
    assert "workload:zaroz_unit_ready_seconds:p95_5m" in names


def test_alerts_have_prefix_severity_and_annotations() -> None:
    alerts = [r for r in _rule_docs() if "alert" in r]
    assert alerts
    for rule in alerts:
        name = str(rule["alert"])
        assert re.fullmatch(r"Zaroz[A-Z][A-Za-z]+", name), name
        labels, ann = rule["labels"], rule["annotations"]
        assert labels["severity"] in ("critical", "warning", "info"), name
        assert set(ann) == {"summary", "description", "runbook_url"}, name
        assert "{{" not in ann["summary"], f"{name}: summary must be static"
        assert "$labels" in ann["description"] or "$value" in ann["description"] or (
            name == "ZarozExporterAbsent"
        ), name
        assert ann["runbook_url"] == f"{DEFAULT_CONFIG.runbook_base}#{name.lower()}", name


def test_required_alerts_exist() -> None:
    names = {a.name for a in alerting.alerts(DEFAULT_CONFIG)}
    for n in (
        "GenerationStuck", "GenerationStuckInvalidSpec", "UnitSignalSpecInvalid",
        "UnitReadinessSlow", "AllocationAckSlow", "AllocationsUndelivered", "DrainTooLong",
        "UnitStartupsFailing", "EventsMissing", "EventTailStalled", "EventRouteFailing",
        "KubeWatchFailing", "KubeNotSynced", "KubeWatchSilent", "ExporterAbsent",
        "ReadinessBudgetBurn", "AllocationAckBudgetBurn",
    ):
        assert f"Zaroz{n}" in names


def test_every_alert_has_a_runbook_section() -> None:
    text = RUNBOOKS.read_text()
    headings = {h.strip().lower() for h in re.findall(r"^## (.+)$", text, re.MULTILINE)}
    for a in alerting.alerts(DEFAULT_CONFIG):
        assert a.anchor in headings, f"docs/runbooks.md lacks `## {a.name}`"
    for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        title = section.splitlines()[0]
        for part in ("Meaning", "Impact", "Diagnosis", "Mitigation"):
            assert f"### {part}" in section, f"{title}: no {part}"
        assert "```promql" in section, f"{title}: no diagnosis query"


def test_runbook_queries_name_real_metrics() -> None:
    known = catalog.sample_names() | recording.recording_names() | {"up", "ALERTS"}
    text = RUNBOOKS.read_text()
    for block in re.findall(r"```promql\n(.*?)```", text, re.DOTALL):
        unknown = promql.metric_names(block) - known
        assert not unknown, f"runbook query {block!r}: {unknown}"


def test_every_alert_has_a_promtool_test() -> None:
    tested = {c.alert for group in cases.cases(DEFAULT_CONFIG).values() for c in group}
    assert tested == {a.name for a in alerting.alerts(DEFAULT_CONFIG)}


def test_every_alert_test_covers_silence_and_firing() -> None:
    for group in cases.cases(DEFAULT_CONFIG).values():
        by_alert: dict[str, tuple[bool, bool]] = {}
        for c in group:
            silent, firing = by_alert.get(c.alert, (False, False))
            by_alert[c.alert] = (
                silent or any(not f for _, f in c.evals),
                firing or any(f for _, f in c.evals),
            )
        for alert, (silent, firing) in by_alert.items():
            assert silent and firing, alert


@pytest.mark.parametrize(
    ("key", "threshold"), [("readiness", 45.0), ("readiness", 0.2), ("allocation_ack", 0.3)]
)
def test_slo_threshold_must_be_a_bucket_boundary(key: str, threshold: float) -> None:
    with pytest.raises(ValueError, match="not a bucket boundary"):
        Config(slos=(SLO(key, 0.99, threshold),))
    with pytest.raises(ValueError, match="not a bucket boundary"):
        recording.slo_rules(key, threshold)


@pytest.mark.parametrize(
    ("key", "threshold"), [("readiness", 45.0), ("readiness", 0.2), ("allocation_ack", 0.3)]
)
def test_native_slo_takes_any_threshold(key: str, threshold: float) -> None:
    """The one switch: native histograms, any threshold, through histogram_fraction."""
    slos = tuple(SLO(k, 0.99, threshold) if k == key else DEFAULT_CONFIG.slo(k)
                 for k in recording.SLO_HISTOGRAMS)
    cfg = Config(slos=slos, native_histograms=True)
    text = render.rule_files(cfg)["recording.yaml"]
    h = recording.SLO_HISTOGRAMS[key]
    assert f"histogram_fraction(0, {recording.le_value(threshold)}, sum by (cluster, workload) " \
           f"(rate({h}[1h])))" in text
    assert "_bucket" not in text and "_count[" not in text
    assert "histogram_quantile(0.99, sum by (cluster, workload) " \
        "(rate(zaroz_unit_ready_seconds[5m])))" in text
    # Same record names as the classic rules: alerts and dashboards read either.
    classic = yaml.safe_load(render.rule_files(DEFAULT_CONFIG)["recording.yaml"])
    native = yaml.safe_load(text)
    names = [[r["record"] for r in g["rules"]] for g in classic["groups"]]
    assert [[r["record"] for r in g["rules"]] for g in native["groups"]][:len(names)] == names
    with pytest.raises(ValueError):
        SLO(key, 0.99, 0.0)


def test_slo_threshold_on_a_boundary_is_used() -> None:
    cfg = Config(slos=(SLO("readiness", 0.995, 30.0), SLO("allocation_ack", 0.999, 0.25)))
    text = render.rule_files(cfg)["recording.yaml"]
    assert 'zaroz_unit_ready_seconds_bucket{le=~"30|30[.]0"}' in text
    assert 'zaroz_unit_allocation_ack_seconds_bucket{le=~"0[.]25"}' in text
    alerts_text = render.rule_files(cfg)["alerts.yaml"]
    assert "(14.4 * 0.005)" in alerts_text and "(14.4 * 0.001)" in alerts_text


def test_slo_objective_range() -> None:
    with pytest.raises(ValueError):
        SLO("readiness", 1.0, 60.0)


def test_job_selector_is_configurable() -> None:
    cfg = Config(job_selector='job=~"zaroz.*",cluster="eu"')
    assert 'absent(up{job=~"zaroz.*",cluster="eu"} == 1)' in render.rule_files(cfg)["alerts.yaml"]


@pytest.mark.parametrize("m", [m for m in catalog.METRICS if m.kind is catalog.Kind.HISTOGRAM])
def test_le_values_match_the_exposition(m: catalog.Metric) -> None:
    """Prometheus 2 matches `le` as a string: the rules must spell bounds as the exporter does
    (and as Prometheus 3 stores them: `le_regex` holds both)."""
    for b in m.buckets:
        assert recording.le_value(b) == format_value(float(b)) == format_value(b)
        pattern = re.compile(recording.le_regex(b))
        assert pattern.fullmatch(format_value(b)) and pattern.fullmatch(recording.om_float(b))
        assert not pattern.fullmatch(recording.om_float(b * 10)), b


# Prometheus 3's spellings of `le` (Go's formatOpenMetricsFloat: strconv 'g', -1, `.0` added).
@pytest.mark.parametrize(("bound", "stored"), [
    (60, "60.0"), (1, "1.0"), (0.5, "0.5"), (0.005, "0.005"), (2.5, "2.5"), (300, "300.0"),
    (123456, "123456.0"), (1e6, "1e+06"), (1234567, "1.234567e+06"), (0.0001, "0.0001"),
    (2.5e-05, "2.5e-05"), (0, "0.0"), (float("inf"), "+Inf"),
])
def test_om_float_is_how_prometheus_3_stores_le(bound: float, stored: str) -> None:
    assert recording.om_float(bound) == stored


def test_no_rule_matches_le_or_quantile_by_one_spelling() -> None:
    """`le="1"` finds nothing on Prometheus 3 (stored `1.0`), `le="1.0"` nothing on 2 from text:
    every `le`/`quantile` matcher of every shipped rule file is a regex holding both."""
    texts = {str(p): p.read_text() for p in ROOT.glob("alerts/rules/**/*.yaml")}
    texts.update({str(p): p.read_text() for p in ROOT.glob("deploy/**/*rules*.yaml")})
    texts.update({str(p): p.read_text() for p in ROOT.glob("deploy/helm/**/rules/**/*.yaml")})
    texts.update({str(p): p.read_text() for p in ROOT.glob("mixin/*/*.libsonnet")})
    assert len(texts) > 6
    found = 0
    for name, text in texts.items():
        bad = re.findall(r'\b(?:le|quantile)\s*(?:=|!=)\s*\\?"', text)
        assert not bad, (name, bad)
        found += len(re.findall(r'\ble=~', text))
    assert found >= 14, found  # 7 windows x 2 SLOs in the classic files at least


def test_promql_selectors() -> None:
    expr = (
        'sum by (workload) (rate(a_bucket{le="1",x=~"a}b"}[5m])) / on (workload) '
        "group_left () b_total offset 1m and time() - c > 0"
    )
    assert promql.metric_selectors(expr) == ['a_bucket{le="1",x=~"a}b"}', "b_total", "c"]


def test_descriptions_say_value_threshold_and_next_step() -> None:
    """What an on-call engineer needs in the notification itself: the value against the
    threshold it crossed (in the same units) and what to do first."""
    for rule in _rule_docs():
        if "alert" not in rule:
            continue
        name, desc = rule["alert"], rule["annotations"]["description"]
        assert re.search(r"\. Next: [a-z].+[.?]$", desc), f"{name}: no next step: {desc}"
        # A comparison with a configured number (not `> 0`, not `== 1`) is a threshold.
        if re.search(r"> (?!0\b)\(?[0-9.]+", str(rule["expr"])):
            assert "(threshold " in desc, f"{name}: no threshold in {desc}"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "250ms"), (5, "5s"), (9.75, "9.75s"), (60, "1m 0s"), (300, "5m 0s"),
     (900, "15m 0s"), (3600, "1h 0m 0s"), (90061, "1d 1h 1m 1s")],
)
def test_human_duration_matches_prometheus(seconds: float, text: str) -> None:
    """Thresholds read like the `humanizeDuration` values next to them (promtool tests render
    the latter: '9m 45s', '11m 0s')."""
    assert alerting.human_duration(seconds) == text


def test_burn_rate_pairs_are_configurable() -> None:
    from alerts.config import BurnRate

    cfg = Config(burn_rates=(BurnRate("1h", "5m", 14.4, "10s", "critical"),))
    burns = [a for a in alerting.alerts(cfg) if a.name == "ZarozReadinessBudgetBurn"]
    assert [(a.for_, a.extra_labels) for a in burns] == [("10s", {"long": "1h", "short": "5m"})]
    with pytest.raises(ValueError, match="window"):
        BurnRate("2d", "5m", 1.0, "1h", "warning")


def test_output_native_histograms_writes_the_native_rules(tmp_path: Path) -> None:
    from alerts.__main__ import main as alerts_main

    assert alerts_main(["--output", str(tmp_path), "--native-histograms"]) == 0
    for name in render.RULE_FILES:
        assert (tmp_path / name).read_text() == (render.NATIVE_RULES_DIR / name).read_text()
    assert "histogram_fraction(0, 60," in (tmp_path / "recording.yaml").read_text()
    assert alerts_main(["--native-histograms"]) == 2  # would rewrite the checked-in rules


def test_every_name_in_the_rules_is_a_classic_one() -> None:
    """Prometheus 2 reads only `[a-zA-Z_:][a-zA-Z0-9_:]*` names (3 reads UTF-8 ones, quoted):
    every metric, record and label name of the shipped rules is a classic one."""
    metric = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
    label = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
    for cfg in (DEFAULT_CONFIG, NATIVE_CONFIG):
        for text in render.rule_files(cfg).values():
            for group in yaml.safe_load(text)["groups"]:
                for rule in group["rules"]:
                    name = rule.get("record") or rule["alert"]
                    assert metric.fullmatch(name), name
                    assert all(label.fullmatch(k) for k in rule.get("labels", {})), rule
                    expr = rule["expr"]
                    assert '{"' not in expr and "{'" not in expr, expr  # a quoted UTF-8 name
                    for sel in promql.metric_selectors(expr):
                        assert metric.fullmatch(sel.split("{", 1)[0]), sel
                    for by in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
                        names = [n.strip() for n in by.split(",") if n.strip()]
                        assert all(label.fullmatch(n) for n in names), (by, expr)
