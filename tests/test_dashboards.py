"""The dashboards: current with their code, complete for operators, and only naming real series."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dashboards
from alerts import recording
from dashboards import lib
from dashboards.__main__ import main as dashboards_main
from exporter import catalog, vocabulary
from tests.components import require
from tools import promql

GENERATED = dashboards.generate()
# Prometheus writes these per scrape target itself; dashboards may use them.
PROMETHEUS_SERIES = frozenset(
    {"up", "scrape_duration_seconds", "scrape_samples_scraped",
     "scrape_samples_post_metric_relabeling", "scrape_series_added"}
)


def _panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that is not a row (rows here are never collapsed, so panels are top level)."""
    for p in dash["panels"]:
        if p["type"] != "row":
            yield p
        yield from p.get("panels", [])


def _targets(dash: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for p in _panels(dash):
        for t in p.get("targets", []):
            yield p["title"], t


def _all() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(file, panel title, target) over every dashboard."""
    for name, dash in GENERATED.items():
        for title, t in _targets(dash):
            yield name, title, t


def test_checked_in_json_is_what_the_code_generates() -> None:
    on_disk = {p.name: p.read_text() for p in dashboards.JSON_DIR.glob("*.json")}
    assert set(on_disk) == set(GENERATED), "run python -m dashboards"
    for name, data in GENERATED.items():
        assert on_disk[name] == lib.dumps(data), f"dashboards/json/{name} is stale: run " \
            "python -m dashboards"
    assert dashboards_main(["--check"]) == 0


def test_check_mode_reports_a_hand_edit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, data in GENERATED.items():
        (tmp_path / name).write_text(lib.dumps(data))
    (tmp_path / "native").mkdir()
    for name, data in dashboards.generate_native().items():
        (tmp_path / "native" / name).write_text(lib.dumps(data))
    monkeypatch.setattr(dashboards.__main__, "JSON_DIR", tmp_path)
    assert dashboards_main(["--check"]) == 0
    edited = next(iter(GENERATED))
    (tmp_path / edited).write_text((tmp_path / edited).read_text().replace("30s", "10s"))
    assert dashboards_main(["--check"]) == 1


def test_uids_are_stable_unique_and_name_the_files() -> None:
    uids = {name: d["uid"] for name, d in GENERATED.items()}
    # Changing one breaks every bookmark and link to the dashboard: update this on purpose only.
    assert set(uids.values()) == {"zaroz-units", "zaroz-generations", "zaroz-exporter"}
    for name, uid in uids.items():
        assert name == f"{uid}.json"
        assert len(uid) <= 40  # Grafana's limit


def test_every_panel_has_a_description_and_a_known_unit() -> None:
    for name, dash in GENERATED.items():
        for p in _panels(dash):
            where = f"{name}: {p['title']}"
            assert p.get("description", "").strip(), f"{where} has no description"
            unit = p["fieldConfig"]["defaults"].get("unit")
            assert unit in lib.UNITS, f"{where} has unit {unit!r}"
            for o in p["fieldConfig"].get("overrides", []):
                for prop in o["properties"]:
                    if prop["id"] == "unit":
                        assert prop["value"] in lib.UNITS, where


def test_latency_panels_are_in_seconds() -> None:
    """A panel plotting a quantile of a _seconds histogram must say so, or 0.25 reads as 0.25."""
    for name, dash in GENERATED.items():
        for p in _panels(dash):
            exprs = [t["expr"] for t in p.get("targets", [])]
            if p["type"] == "timeseries" and exprs and all(
                "histogram_quantile" in e or ":p" in e for e in exprs
            ):
                assert p["fieldConfig"]["defaults"]["unit"] == "s", f"{name}: {p['title']}"
            if p["type"] == "heatmap":
                assert p["options"]["yAxis"]["unit"] == "s", f"{name}: {p['title']}"


def test_panel_ids_are_unique_and_the_grid_does_not_overlap() -> None:
    for name, dash in GENERATED.items():
        ids = [p["id"] for p in dash["panels"]]
        assert len(ids) == len(set(ids)), name
        cells: set[tuple[int, int]] = set()
        for p in dash["panels"]:
            pos = p["gridPos"]
            assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, f"{name}: {p.get('title')}"
            for x in range(pos["x"], pos["x"] + pos["w"]):
                for y in range(pos["y"], pos["y"] + pos["h"]):
                    assert (x, y) not in cells, f"{name}: {p.get('title')} overlaps"
                    cells.add((x, y))


def test_variables_and_datasources() -> None:
    for name, dash in GENERATED.items():
        variables = {v["name"]: v for v in dash["templating"]["list"]}
        assert list(variables) == ["datasource", "cluster", "tracing", "workload", "namespace",
                                   "exporter"], name
        cluster = variables["cluster"]
        assert cluster["type"] == "query" and not cluster["multi"], name
        assert cluster["query"]["query"] == "label_values(zaroz_exporter_build_info, cluster)"
        assert variables["exporter"]["type"] == "textbox"
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        assert variables["tracing"]["type"] == "datasource"
        assert variables["tracing"]["query"] in {"tempo", "jaeger"}
        for key in ("workload", "namespace"):
            v = variables[key]
            assert v["multi"] and v["includeAll"], f"{name}: ${key}"
            assert v["current"]["value"] == ["$__all"]
            assert v["datasource"] == lib.PROMETHEUS
        for p in _panels(dash):
            assert p["datasource"] == lib.PROMETHEUS, f"{name}: {p['title']}"
            for t in p.get("targets", []):
                assert t["datasource"] == lib.PROMETHEUS, f"{name}: {p['title']}"


def test_every_selector_is_filtered_by_cluster() -> None:
    """kubernetes-mixin's multi-cluster convention: one cluster at a time, on every query."""
    from tools import promql as selectors

    count = 0
    for name, title, t in _all():
        for sel in selectors.metric_selectors(t["expr"]):
            count += 1
            assert 'cluster=~"$cluster"' in sel, f"{name}: {title}: {sel}"
    assert count > 50


def test_dashboards_link_each_other_and_the_overview() -> None:
    uids = {d["uid"] for d in GENERATED.values()}
    for name, dash in GENERATED.items():
        urls = {link["url"] for link in dash["links"]}
        assert {f"/d/{u}" for u in uids - {dash["uid"]}} <= urls, name
        assert "${exporter}/" in urls, name
        per_workload = [p for p in _panels(dash) if any(
            "{{workload}}" in t.get("legendFormat", "") for t in p.get("targets", []))
            and p["type"] == "timeseries"]
        assert per_workload, name
        for p in per_workload:
            links = [x["url"] for x in p["fieldConfig"]["defaults"].get("links", [])]
            assert "${exporter}/#wl-${__field.labels.workload}" in links, (name, p["title"])
            assert sum(u.startswith("/d/") for u in links) == 3, (name, p["title"])


def test_headline_histograms_have_exemplar_queries() -> None:
    """Exemplars (the unit's trace id) come only from queries on the raw buckets."""
    for h in ("zaroz_unit_ready_seconds", "zaroz_unit_allocation_ack_seconds",
              "zaroz_unit_drain_seconds"):
        hits = [
            (name, title) for name, title, t in _all()
            if t.get("exemplar") and f"{h}_bucket" in promql.metric_names(t["expr"])
        ]
        assert hits, f"no exemplar query on {h}_bucket"


def test_percentiles_use_recording_rules_where_they_exist() -> None:
    """Raw histogram_quantile only where no recorded quantile has the grouping (drain by reason)."""
    for name, title, t in _all():
        expr = t["expr"]
        if "histogram_quantile" not in expr:
            continue
        (bucket,) = promql.metric_names(expr)
        histogram = bucket.removesuffix("_bucket")
        if histogram in recording.QUANTILE_HISTOGRAMS:
            assert "by (workload, le)" not in expr, (
                f"{name}: {title}: use {recording.quantile_name(histogram, 'p95')}"
            )
    used = {n for _, _, t in _all() for n in promql.metric_names(t["expr"])}
    for h in (recording.READY, recording.ALLOCATION_ACK, recording.GENERATION_OBSERVE):
        for key in recording.QUANTILES:
            assert recording.quantile_name(h, key) in used


def _allowed_names() -> set[str]:
    return catalog.sample_names() | recording.recording_names() | PROMETHEUS_SERIES


def test_every_expression_names_only_declared_series() -> None:
    allowed = _allowed_names()
    seen: set[str] = set()
    for name, title, t in _all():
        names = promql.metric_names(t["expr"])
        assert names, f"{name}: {title}: no metric found in {t['expr']!r}"
        unknown = names - allowed
        assert not unknown, f"{name}: {title}: {sorted(unknown)} not in the catalog"
        seen |= names
    for name, dash in GENERATED.items():
        for v in dash["templating"]["list"]:
            if v["type"] == "query":
                m = promql.variable_metric(v["query"]["query"])
                assert m in allowed, f"{name}: ${v['name']} reads {m}"
    # The groups the brief asks the dashboards to cover are all on some panel.
    for prefix in ("zaroz_kube_", "zaroz_webhook_", "zaroz_traces_", "zaroz_exporter_last_scrape_"):
        assert any(n.startswith(prefix) for n in seen), prefix


def test_the_name_check_catches_an_unknown_metric() -> None:
    expr = 'sum(rate(zaroz_unit_ready_total{workload=~"$w"}[$__rate_interval])) - up'
    assert promql.metric_names(expr) - _allowed_names() == {"zaroz_unit_ready_total"}
    with pytest.raises(KeyError):
        lib.select("zaroz_unit_ready_total")
    with pytest.raises(ValueError, match="no label"):
        lib.select("zaroz_events_total", namespace=lib.NAMESPACE)
    with pytest.raises(ValueError, match="histogram"):
        lib.select("zaroz_unit_ready_seconds")
    with pytest.raises(ValueError):
        lib.one_of(["delivered", "lost"], vocabulary.ALLOCATION_OUTCOMES)
    with pytest.raises(KeyError):
        lib.recorded("workload:zaroz_unit_ready_seconds:p90_5m")


def _promtool_rules(exprs: list[str]) -> str:
    """Expressions as recording rules (JSON is YAML), Grafana's macros replaced by durations."""
    rules = []
    for i, e in enumerate(exprs):
        for macro, value in (("$__rate_interval", "5m"), ("$__interval", "1m"),
                             ("$__range", "1h")):
            e = e.replace(macro, value)
        rules.append({"record": f"dashboard:expr_{i}:check", "expr": e})
    return json.dumps({"groups": [{"name": "dashboards", "rules": rules}]})


def test_every_expression_parses_with_promtool(tmp_path: Path) -> None:
    promtool = require("promtool")
    exprs = [t["expr"] for _, _, t in _all()]
    good = tmp_path / "dashboards.rules.yml"
    good.write_text(_promtool_rules(exprs))
    res = subprocess.run([promtool, "check", "rules", str(good)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    bad = tmp_path / "broken.rules.yml"
    bad.write_text(_promtool_rules(["sum by (workload (zaroz_events_total)"]))
    res = subprocess.run([promtool, "check", "rules", str(bad)], capture_output=True, text=True)
    assert res.returncode != 0


def _walk(a: Any, b: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of everything in `a` (grafanalib's raw output) missing from `b`."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k, v in a.items():
            if k not in b:
                yield f"{path}.{k}", v
            else:
                yield from _walk(v, b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _walk(x, y, f"{path}[{i}]")


def test_normalising_drops_only_nulls_and_documented_keys() -> None:
    documented = set().union(*lib._DROP.values(), {"tags"})  # tags: of a variable's `current`
    for uid, build in dashboards.BUILDERS.items():
        raw = json.loads(json.dumps(build().to_json_data(), cls=lib.DashboardEncoder))
        out = lib.normalise(json.loads(json.dumps(raw)))
        rest = ({k: v for k, v in d.items() if k != "panels"} for d in (raw, out))
        dropped = list(_walk(*rest))
        for panel, kept in zip(raw["panels"], out["panels"], strict=True):
            if panel["type"] == "row":  # a row keeps exactly what Grafana's RowPanel has
                assert set(kept) == set(panel) & lib._ROW_KEYS - {
                    k for k, v in panel.items() if v is None
                }
            else:
                dropped += _walk(panel, kept, f"panel {panel['title']}")
        for path, value in dropped:
            key = path.rsplit(".", 1)[-1]
            assert value is None or key in documented, f"{uid}: normalise dropped {path}"


NATIVE = dashboards.generate_native()


def test_native_dashboards_are_checked_in_and_read_native_histograms() -> None:
    on_disk = {p.name: p.read_text() for p in dashboards.NATIVE_DIR.glob("*.json")}
    assert set(on_disk) == set(NATIVE) == {"zaroz-units-native.json"}, "run python -m dashboards"
    for name, data in NATIVE.items():
        assert on_disk[name] == lib.dumps(data), f"{name} is stale: run python -m dashboards"
        assert data["uid"] == name.removesuffix(".json") and "native" in data["title"]
    histograms = {m.name for m in catalog.METRICS if m.kind is catalog.Kind.HISTOGRAM}
    allowed = _allowed_names() | histograms
    classic = {f"{h}{x}" for h in histograms for x in ("_bucket", "_count", "_sum")}
    heatmaps = 0
    for name, dash in NATIVE.items():
        for title, t in _targets(dash):
            names = promql.metric_names(t["expr"])
            assert names and names <= allowed, (name, title, names - allowed)
            # no classic bucket series anywhere: a native-only Prometheus has none
            assert not names & classic, (name, title, t["expr"])
        for p in _panels(dash):
            if p["type"] == "heatmap":
                heatmaps += 1
                (t,) = p["targets"]
                assert t["format"] == "heatmap" and promql.metric_names(t["expr"]) <= histograms
    assert heatmaps == 2
    # The classic dashboards never read a bare histogram name (a classic Prometheus has none).
    for name, _, t in _all():
        assert not promql.metric_names(t["expr"]) & histograms, (name, t["expr"])


def test_native_expressions_parse_with_promtool(tmp_path: Path) -> None:
    promtool = require("promtool")
    exprs = [t["expr"] for dash in NATIVE.values() for _, t in _targets(dash)]
    path = tmp_path / "native.rules.yml"
    path.write_text(_promtool_rules(exprs))
    res = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
