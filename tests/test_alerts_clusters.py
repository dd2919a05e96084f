"""Two clusters, one rule file: alerts keep the cluster label and never merge clusters.

alerts/tests/clusters.yaml (run with the other promtool tests) holds the cases; here they are
run against rules that aggregate without the label, where each case must fail (so the cases
can tell), and with a configured label of another name, where they must pass."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import yaml

from alerts import alerting, cases, render
from alerts.config import DEFAULT_CONFIG, Config
from tests.components import require


def _promtool(tmp: Path, rules_config: Config,
              cases_config: Config) -> subprocess.CompletedProcess[str]:
    (tmp / "rules").mkdir()
    (tmp / "tests").mkdir()
    for name, text in render.rule_files(rules_config).items():
        (tmp / "rules" / name).write_text(text)
    doc = cases.test_documents(cases_config)["clusters.yaml"]
    (tmp / "tests" / "clusters.yaml").write_text(render.dump(doc))
    return subprocess.run([require("promtool"), "test", "rules", "clusters.yaml"],
                          cwd=tmp / "tests", capture_output=True, text=True, timeout=120)


def test_every_aggregation_keeps_the_cluster_label() -> None:
    exprs = [r["expr"] for g in yaml.safe_load(render.rule_files()["recording.yaml"])["groups"]
             for r in g["rules"]] + [a.expr for a in alerting.alerts(DEFAULT_CONFIG)]
    groupings = [m.group(1) for e in exprs for m in re.finditer(r"\b(?:by|on) \(([^)]*)\)", e)]
    assert len(groupings) > 40
    assert all("cluster" in [x.strip() for x in g.split(",")] for g in groupings), groupings


def test_the_cases_fail_when_rules_merge_clusters(tmp_path: Path) -> None:
    merged = dataclasses.replace(DEFAULT_CONFIG, cluster_label="not_a_label")
    proc = _promtool(tmp_path, merged, DEFAULT_CONFIG)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    for c in cases.cases(DEFAULT_CONFIG)["clusters"]:
        assert c.name in out, f"{c.name} passed on merged clusters:\n{out}"


def test_the_cluster_label_is_configurable(tmp_path: Path) -> None:
    region = dataclasses.replace(DEFAULT_CONFIG, cluster_label="region")
    proc = _promtool(tmp_path, region, region)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "by (region, workload" in render.rule_files(region)["recording.yaml"]
