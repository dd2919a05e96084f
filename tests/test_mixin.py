"""The monitoring mixin (mixin/), evaluated by real jsonnets: PyPI's `jsonnet` (C++, 0.20+) and
`gojsonnet` (go-jsonnet), and the `jsonnet` command (Debian's C++ 0.18) for the README's
commands.

With the default `_config` it renders the checked-in rules and dashboards; with an override it
renders what the Python generators render for the same `alerts.config.Config`; promtool accepts
what it renders; its number formatting is Python's.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import dashboards
from alerts import render
from alerts.alerting import human_duration
from alerts.config import DEFAULT_CONFIG, NATIVE_CONFIG, SLO, BurnRate, Config
from alerts.recording import SLO_HISTOGRAMS, SLO_WINDOWS, le_regex, le_value, om_float
from alerts.template import to_config
from exporter import catalog
from tests.components import missing, require
from tests.test_alerts_promtool import PROMTOOLS, promtool
from tools import mixin as mixingen

ROOT = Path(__file__).resolve().parent.parent
MIXIN = ROOT / "mixin"


ENGINES = ("cpp", "go")  # the two implementations, as PyPI's bindings


def _binding(engine: str) -> Any:
    module, package = {"cpp": ("_jsonnet", "jsonnet"), "go": ("_gojsonnet", "gojsonnet")}[engine]
    try:
        return importlib.import_module(module)
    except ImportError:
        missing(f"test_mixin: PyPI {package} is not installed (pip install -e '.[test]')")


def evaluate(snippet: str, jpath: list[str] | None = None, engine: str = "cpp") -> Any:
    """`snippet` evaluated by a binding (`cpp`, `go`) or by the `jsonnet` command."""
    paths = jpath or [str(ROOT)]
    if engine != "command":
        return json.loads(_binding(engine).evaluate_snippet("snippet", snippet, jpathdir=paths))
    run = subprocess.run([require("jsonnet"), *(a for p in paths for a in ("-J", p)), "-e",
                          snippet],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def render_mixin(config: str | dict[str, Any] = "{}", engine: str = "cpp") -> dict[str, Any]:
    """The mixin's three outputs with `_config+:: config` (jsonnet source or a JSON-able dict)."""
    override = config if isinstance(config, str) else json.dumps(config)
    return evaluate(
        f"local m = (import 'mixin/mixin.libsonnet') + {{ _config+:: {override} }};\n"
        "{ alerts: m.prometheusAlerts, rules: m.prometheusRules, dashboards: m.grafanaDashboards }",
        engine=engine)


def python_outputs(config: Config) -> dict[str, Any]:
    """What `python -m alerts --output` and the dashboard builders give for `config`."""
    files = {n: yaml.safe_load(t) for n, t in render.rule_files(config).items()}
    return {"alerts": files["alerts.yaml"], "rules": files["recording.yaml"],
            "dashboards": dashboards.generate(config)}


def _on_disk(rules: Path, boards: dict[str, Path]) -> dict[str, Any]:
    return {"alerts": yaml.safe_load((rules / "alerts.yaml").read_text()),
            "rules": yaml.safe_load((rules / "recording.yaml").read_text()),
            "dashboards": {n: json.loads(p.read_text()) for n, p in boards.items()}}


def _names(doc: dict[str, Any]) -> list[list[str]]:
    return [[r.get("alert") or r["record"] for r in g["rules"]] for g in doc["groups"]]


def _assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    for part in ("alerts", "rules"):  # per rule first, for a readable failure
        assert _names(got[part]) == _names(want[part]), part
        for g, w in zip(got[part]["groups"], want[part]["groups"], strict=True):
            for r, s in zip(g["rules"], w["rules"], strict=True):
                assert r == s
        assert got[part] == want[part]
    assert sorted(got["dashboards"]) == sorted(want["dashboards"])
    for name, board in want["dashboards"].items():
        assert got["dashboards"][name] == board, name


def test_default_config_renders_the_checked_in_rules_and_dashboards() -> None:
    boards = {p.name: p for p in (ROOT / "dashboards" / "json").glob("*.json")}
    assert len(boards) == 3
    _assert_same(render_mixin(), _on_disk(ROOT / "alerts" / "rules", boards))


def test_native_histograms_render_the_checked_in_native_rules_and_dashboards() -> None:
    """The native rules of alerts/rules/native/, and each dashboard's native variant where
    dashboards/json/native/ has one (the classic one elsewhere)."""
    json_dir = ROOT / "dashboards" / "json"
    boards = {p.name: p for p in json_dir.glob("*.json")
              if not (json_dir / "native" / p.name.replace(".json", "-native.json")).is_file()}
    boards.update({p.name: p for p in (json_dir / "native").glob("*.json")})
    got = render_mixin("{ nativeHistograms: true }")
    _assert_same(got, _on_disk(ROOT / "alerts" / "rules" / "native", boards))
    _assert_same(got, python_outputs(NATIVE_CONFIG))


# An installation's own values, written as an operator writes them in jsonnet, and the same
# installation as alerts.config.Config. Thresholds that need rounding (0.333, 2.5 -> 2.5s,
# 5400 -> 1h 30m 0s), a `for` of 0m (no `for:` key), SLOs on other bucket bounds, other pairs.
OVERRIDE = """{
  exporterSelector: 'job="zaroz", namespace="monitoring"',
  clusterLabel: 'k8s_cluster',
  generationLagSeconds: 600,
  generationLagFor: '10m',
  eventsMissingFor: '2m',
  absentFor: '0m',
  ackP95Seconds: 2.5,
  undeliveredRatio: 0.125,
  drainSeconds: 5400,
  kubeFailureRate: 0.333,
  routeSuccessAgeSeconds: 45.25,
  runbookBase: 'https://wiki.example.com/zaroz/runbooks/',
  slos+: { readiness+: { objective: 0.995, threshold: 120 }, allocationAck+: { threshold: 0.5 } },
  burnRates: [
    { long: '2h', short: '5m', factor: 12, 'for': '0m', severity: 'critical' },
    { long: '3d', short: '6h', factor: 0.75, 'for': '1h', severity: 'info' },
  ],
}"""
OVERRIDE_CONFIG = Config(
    job_selector='job="zaroz", namespace="monitoring"', cluster_label="k8s_cluster",
    generation_lag_seconds=600, generation_lag_for="10m", events_missing_for="2m",
    absent_for="0m", ack_p95_seconds=2.5, undelivered_ratio=0.125, drain_seconds=5400,
    kube_failure_rate=0.333, route_success_age_seconds=45.25,
    runbook_base="https://wiki.example.com/zaroz/runbooks/",
    slos=(SLO("readiness", 0.995, 120), SLO("allocation_ack", 0.99, 0.5)),
    burn_rates=(BurnRate("2h", "5m", 12, "0m", "critical"),
                BurnRate("3d", "6h", 0.75, "1h", "info")),
)


@pytest.mark.parametrize("engine", ENGINES)
def test_an_override_renders_what_python_renders_for_the_same_config(engine: str) -> None:
    got = render_mixin(OVERRIDE, engine)
    _assert_same(got, python_outputs(OVERRIDE_CONFIG))
    text = json.dumps(got)
    for seen in ('k8s_cluster', 'job=\\"zaroz\\", namespace=\\"monitoring\\"',
                 "wiki.example.com/zaroz/runbooks/#zarozgenerationstuck", "1h 30m 0s"):
        assert seen in text, seen
    assert "cluster=~" not in text.replace("k8s_cluster=~", "")


@pytest.mark.parametrize("engine", ENGINES)
def test_the_override_with_native_histograms_and_a_threshold_off_the_buckets(engine: str) -> None:
    """Native: any SLO threshold (45 s is no bound of the readiness histogram)."""
    config = Config(**{**OVERRIDE_CONFIG.__dict__, "native_histograms": True,
                       "slos": (SLO("readiness", 0.995, 45), SLO("allocation_ack", 0.99, 1.5))})
    got = render_mixin(OVERRIDE + """ + {
      nativeHistograms: true,
      slos+: { readiness+: { threshold: 45 }, allocationAck+: { threshold: 1.5 } },
    }""", engine)
    _assert_same(got, python_outputs(config))


def test_any_config_round_trips_through_to_config() -> None:
    """Every field reaches jsonnet (the dict the tests and config.libsonnet are written from)."""
    config = Config(**{**OVERRIDE_CONFIG.__dict__, "burn_rates": (),
                       "tail_stalled_window": "20m", "invalid_spec_for": "1m"})
    got = render_mixin(to_config(config))
    assert "zaroz-slo" not in [g["name"] for g in got["alerts"]["groups"]]
    _assert_same(got, python_outputs(config))


def test_python_m_alerts_output_equals_the_mixin_with_the_same_flags(tmp_path: Path) -> None:
    """`python -m alerts --output` (what an installation without jsonnet runs) and the mixin
    with the same runbook base and histogram kind write the same rules."""
    base = "https://runbooks.example.org/zaroz/"
    run = subprocess.run([sys.executable, "-m", "alerts", "--output", str(tmp_path),
                          "--runbook-base", base, "--native-histograms"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = render_mixin({"runbookBase": base, "nativeHistograms": True})
    assert got["alerts"] == yaml.safe_load((tmp_path / "alerts.yaml").read_text())
    assert got["rules"] == yaml.safe_load((tmp_path / "recording.yaml").read_text())
    assert base + "#zarozexporterabsent" in json.dumps(got["alerts"])


def _random_config(rnd: random.Random) -> Config:
    """Every field drawn: numbers of any size and precision, durations, labels, selectors."""
    from exporter import catalog

    native = rnd.random() < 0.5

    def number() -> float:
        return rnd.choice([round(rnd.uniform(0, 10), rnd.randint(0, 6)), rnd.uniform(0, 1),
                           float(rnd.randint(1, 10**6)), 10 ** rnd.uniform(-4, 6)]) or 1.0

    def duration() -> str:
        return rnd.choice(["0m", "0s", ""] + [f"{rnd.randint(1, 90)}{u}" for u in "smhd"])

    def threshold(key: str) -> float:
        buckets = catalog.get(SLO_HISTOGRAMS[key]).buckets
        return number() if native else float(rnd.choice(buckets))

    values: dict[str, Any] = {}
    for f in dataclasses.fields(Config):
        if f.name.endswith("_for"):
            values[f.name] = duration()
        elif f.type == "float":
            values[f.name] = number()
    values["events_missing_window"] = values["tail_stalled_window"] = f"{rnd.randint(1, 59)}m"
    values.update(
        job_selector=rnd.choice(['job="zaroz"', 'job=~"zaroz-.*", namespace!="test"']),
        cluster_label=rnd.choice(["cluster", "k8s_cluster_name", "region"]),
        runbook_base=rnd.choice(["https://wiki.example.com/zaroz/", "http://runbooks.local/z?a=1"]),
        native_histograms=native,
        slos=tuple(SLO(k, round(rnd.uniform(0.9, 0.999), rnd.randint(3, 6)), threshold(k))
                   for k in SLO_HISTOGRAMS),
        burn_rates=tuple(
            BurnRate(rnd.choice(SLO_WINDOWS), rnd.choice(SLO_WINDOWS), number(), duration(),
                     rnd.choice(["critical", "warning", "info"]))
            for _ in range(rnd.randint(0, 5))),
    )
    return Config(**values)


@pytest.mark.parametrize("seed", range(12))
def test_random_configs_render_as_python_renders_them(seed: int) -> None:
    """Configurations nobody wrote by hand, through the go-jsonnet binding (the faster one)."""
    config = _random_config(random.Random(seed))
    _assert_same(render_mixin(to_config(config), "go"), python_outputs(config))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_classic_slo_threshold_must_be_a_bucket_bound(engine: str) -> None:
    with pytest.raises(ValueError, match="bucket boundary"):
        Config(slos=(SLO("readiness", 0.99, 45), SLO("allocation_ack", 0.99, 1.0)))
    with pytest.raises(RuntimeError, match="45 s is not a bucket boundary of zaroz_unit_ready"):
        render_mixin("{ slos+: { readiness+: { threshold: 45 } } }", engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_bad_runbook_base_or_switch_is_refused(engine: str) -> None:
    with pytest.raises(RuntimeError, match="runbook base"):
        render_mixin("{ runbookBase: 'wiki/runbooks#x' }", engine)
    with pytest.raises(RuntimeError, match="nativeHistograms"):
        render_mixin("{ nativeHistograms: 'yes' }", engine)


@pytest.mark.parametrize("version", PROMTOOLS)
@pytest.mark.parametrize("native", [False, True], ids=["classic", "native"])
def test_promtool_accepts_the_rendered_rules(tmp_path: Path, native: bool, version: str) -> None:
    """On the oldest supported promtool and on 3.5 (their rule files are the Python ones, which
    `promtool test rules` runs on both: tests/test_alerts_promtool.py)."""
    tool = promtool(version)
    got = render_mixin(f"{OVERRIDE} + {{ nativeHistograms: {str(native).lower()} }}")
    paths = []
    for part in ("alerts", "rules"):
        path = tmp_path / f"{part}.yaml"
        path.write_text(yaml.safe_dump(got[part], sort_keys=False))
        paths.append(str(path))
    run = subprocess.run([tool, "check", "rules", *paths], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    # 20 alerts and one per burn-rate pair and SLO (2 x 2); 39 recording rules
    assert run.stdout.count("SUCCESS: ") == 2
    assert "SUCCESS: 24 rules found" in run.stdout and "SUCCESS: 39 rules found" in run.stdout


def test_the_readme_example_renders_from_a_vendor_directory(tmp_path: Path) -> None:
    """The usage of mixin/README.md, as jsonnet-bundler lays it out (vendor/<name>/)."""
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / "zaroz-exporter-mixin").symlink_to(MIXIN)
    readme = (MIXIN / "README.md").read_text()
    example = re.search(r"```jsonnet\n(.*?)```", readme, re.S)
    assert example is not None
    out = evaluate(f"local x = {example.group(1)}; x.prometheusAlerts", [str(vendor)])
    text = json.dumps(out)
    assert 'namespace=\\"monitoring\\"' in text and "k8s_cluster" in text
    assert "wiki.example.com" in text


def test_the_readme_commands_render_the_readme_config(tmp_path: Path) -> None:
    """mixin/README.md's shell commands, run as written by the `jsonnet` command on its example
    file, give what the Python generators give for the same Config; promtool accepts them."""
    require("jsonnet")
    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "zaroz-exporter-mixin").symlink_to(MIXIN)
    readme = (MIXIN / "README.md").read_text()
    for lang, name in (("jsonnet", "zaroz.jsonnet"), ("sh", "render.sh")):
        block = re.search(rf"```{lang}\n(.*?)```", readme, re.S)
        assert block is not None, lang
        (tmp_path / name).write_text(block.group(1))
    run = subprocess.run(["bash", "-e", "render.sh"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    got = {"alerts": yaml.safe_load((tmp_path / "alerts.yaml").read_text()),
           "rules": yaml.safe_load((tmp_path / "rules.yaml").read_text()),
           "dashboards": {p.name: json.loads(p.read_text())
                          for p in (tmp_path / "dashboards").glob("*.json")}}
    config = Config(job_selector='job="zaroz-exporter", namespace="monitoring"',
                    cluster_label="k8s_cluster", generation_lag_seconds=600,
                    runbook_base="https://wiki.example.com/zaroz/runbooks/",
                    native_histograms=True)
    _assert_same(got, python_outputs(config))
    for version in PROMTOOLS:
        check = subprocess.run([promtool(version), "check", "rules", "alerts.yaml", "rules.yaml"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, (version, check.stdout + check.stderr)


def test_the_readme_lists_every_config_key() -> None:
    readme = (MIXIN / "README.md").read_text()
    defaults = evaluate("(import 'mixin/mixin.libsonnet')._config")
    assert defaults == json.loads(json.dumps(to_config(DEFAULT_CONFIG)))
    for key in defaults:
        assert f"| `{key}` |" in readme, key


def test_the_generated_files_are_current() -> None:
    """(tools.gen --check covers them too, with everything else.)"""
    for path, text in mixingen.files().items():
        assert path.read_text() == text, f"{path} is stale: python -m tools.mixin"


def _values() -> list[float]:
    rnd = random.Random(25)
    values = [0.99, 1 - 0.99, 14.4 * (1 - 0.99) * 100, 0.125, 0.12345, 97.345, 2.675, 0.00015,
              1e-5, 0.1, 1 / 3, 9.75, 59.99995, 60.0, 0.9999, 0.99995, 1.0, 300.0, 5400.0, 86461.0,
              1e16, 2.5e-7, 123456.5, 999999.5, 1.0625, 1.1875, 0.0009765625, 99995.0]
    for _ in range(100):
        values.append(rnd.choice([rnd.uniform(0, 1), rnd.uniform(0, 120), 10 ** rnd.uniform(-6, 7),
                                  round(rnd.uniform(0, 100), rnd.randint(0, 5)),
                                  rnd.randint(0, 10**6) / 8]))
    return values


@pytest.mark.parametrize("engine", [*ENGINES, "command"])
def test_numbers_are_written_as_python_writes_them(engine: str) -> None:
    """mixin/lib/format.libsonnet against the Python functions it stands for (ties, carries,
    exponents, values that are no exact decimal)."""
    values = _values()
    got = evaluate(
        f"local z = import 'mixin/lib/format.libsonnet'; local v = {json.dumps(values)};\n"
        "{ g4: [z.g(x, 4) for x in v], g6: [z.g(x, 6) for x in v],\n"
        "  num: [z.num(x) for x in v], duration: [z.duration(x) for x in v] }", engine=engine)
    want = {"g4": [f"{x:.4g}" for x in values], "g6": [f"{x:.6g}" for x in values],
            "num": [le_value(x) for x in values], "duration": [human_duration(x) for x in values]}
    for key, expected in want.items():
        bad = [(x, g, w) for x, g, w in zip(values, got[key], expected, strict=True) if g != w]
        assert not bad, (key, bad[:5])


@pytest.mark.parametrize("engine", ENGINES)
def test_le_values_are_written_as_python_writes_them(engine: str) -> None:
    """z.omFloat and z.leRegex against alerts.recording's om_float and le_regex: the bucket
    bounds of every histogram and the values where Go's %g turns to an exponent."""
    values = sorted({*(b for m in catalog.METRICS for b in m.buckets), 0.0001, 0.00001, 2.5e-7,
                     99999.5, 123456.0, 999999.0, 1e6, 1234567.0, 1e16})
    got = evaluate(
        f"local z = import 'mixin/lib/format.libsonnet'; local v = {json.dumps(values)};\n"
        "{ om: [z.omFloat(x) for x in v], le: [z.leRegex(x) for x in v] }", engine=engine)
    assert got == {"om": [om_float(x) for x in values], "le": [le_regex(x) for x in values]}


def test_the_alerts_modules_import_in_one_direction() -> None:
    """No two modules of alerts/ import each other, lazily or not (alerts.recording imported
    alerts.config inside a function while alerts.config imported it): the symbolic Config the
    mixin is built from needs each module's place to be clear."""
    graph: dict[str, set[str]] = {}
    for path in (ROOT / "alerts").glob("*.py"):
        tree = ast.parse(path.read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        graph[f"alerts.{path.stem}"] = {m for m in found if m.startswith("alerts.")}
    assert graph["alerts.config"] >= {"alerts.recording"}
    for a, deps in graph.items():
        for b in deps & graph.keys():
            assert a not in graph[b], f"{a} and {b} import each other"
