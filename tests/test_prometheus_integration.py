"""A real Prometheus scraping the demo with the generated rules: every query must work on data.

promtool tests prove the alert logic on synthetic series; this proves the rules and dashboard
queries match what the exporter really exposes (names, labels, `le` spelling) and evaluate
without errors on a real server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alerts import alerting, recording, render
from alerts.config import DEFAULT_CONFIG
from exporter import catalog
from tests.components import require, start_prometheus, stop_process
from tests.promapi import Prom, get, ok, wait
from tests.serving import free_port
from tools import promql

ROOT = Path(__file__).resolve().parent.parent
DASHBOARDS = ROOT / "dashboards" / "json"
JOB = "zaroz-exporter"
# Simulated seconds per wall second: enough units start, allocate and drain within seconds.
TIME_SCALE = 20.0
DEMO_SECONDS = 180  # stopped by the fixture at the end; long enough on a loaded machine
# Metrics the demo cannot show: kube failures (its API emulator never fails), and webhooks,
# checkpoints, traces and metric exports over OTLP (features the demo does not turn on). Queries
# reading only these may return nothing; they must still be valid.
ABSENT_IN_DEMO = {"zaroz_kube_failures_total"} | {
    m.name for m in catalog.METRICS if m.name.startswith("zaroz_exporter_otlp_metrics_")} | {
    s
    for m in catalog.METRICS
    if m.group in ("webhook", "traces")
    for s in ([f"{m.name}{x}" for x in ("_bucket", "_sum", "_count")]
              if m.kind is catalog.Kind.HISTOGRAM else [m.name])
}

# The demo with a raised simulator time scale (the CLI keeps real time for humans).
DEMO = """
import functools, sys
import exporter.commands.demo as demo
from exporter.commands import logs
from exporter.cli import build_parser
from zaroz_sim.route import LiveFeed
demo.LiveFeed = functools.partial(LiveFeed, time_scale=float(sys.argv[1]))
args = build_parser().parse_args(["demo", *sys.argv[2:]])
logs.setup(args.log_level, args.log_format)
sys.exit(demo.main(args))
"""


CLUSTER = "demo-cluster"




@pytest.fixture(scope="module")
def prom() -> Iterator[Prom]:
    prometheus = require("prometheus")
    exporter_port, prom_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="zaroz-prom-") as tmp:
        cfg = Path(tmp) / "prometheus.yml"
        rule_files = [str(render.RULES_DIR / n) for n in render.RULE_FILES]
        cfg.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": rule_files,
                    "scrape_configs": [
                        {
                            "job_name": JOB,
                            # The cluster label Prometheus adds in a multi-cluster setup
                            # (rules keep it, dashboards filter on it).
                            "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"],
                                                "labels": {"cluster": CLUSTER}}],
                        }
                    ],
                }
            )
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        demo = subprocess.Popen(
            [sys.executable, "-c", DEMO, str(TIME_SCALE), "--listen",
             f"127.0.0.1:{exporter_port}", "--duration", str(DEMO_SECONDS), "--rate", "1",
             "--history", "60"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        server = start_prometheus(prometheus, cfg, f"{tmp}/data", prom_port)
        try:
            p = Prom(f"http://127.0.0.1:{prom_port}")
            wait("prometheus ready", lambda: ok(f"{p.base}/-/ready"), 20)
            wait("exporter scraped", lambda: p.result(f'up{{job="{JOB}"}} == 1'), 60)
            # Recording rules need two scrapes of observed histograms and a rule evaluation
            # after them; give every record a chance (the tests below report the empty ones).
            names = sorted(recording.recording_names())
            # The event-log series appear once the demo has replayed its history.
            wait("demo's history replayed", lambda: p.result(
                "count(count by (workload) (zaroz_events_total)) == 3"), 60)
            deadline = time.monotonic() + 45
            while time.monotonic() < deadline and not all(p.result(n) for n in names):
                time.sleep(1)
            yield p
        finally:
            stop_process(server)
            stop_process(demo)


def _rules(p: Prom) -> list[dict[str, Any]]:
    body = get(f"{p.base}/api/v1/rules")
    assert body["status"] == "success"
    return [r for g in body["data"]["groups"] for r in g["rules"]]


def test_rules_loaded_and_healthy(prom: Prom) -> None:
    rules = _rules(prom)
    names = {r["name"] for r in rules}
    assert recording.recording_names() <= names
    assert {a.name for a in alerting.alerts(DEFAULT_CONFIG)} <= names
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad


def test_every_recording_rule_has_data(prom: Prom) -> None:
    empty = [n for n in sorted(recording.recording_names()) if not prom.result(n)]
    assert not empty, f"recording rules without data on the demo: {empty}"
    # ... and keeps the cluster label.
    unlabelled = [n for n in sorted(recording.recording_names())
                  if any(r["metric"].get("cluster") != CLUSTER for r in prom.result(n))]
    assert not unlabelled, f"recording rules that lost the cluster label: {unlabelled}"


def test_every_alert_expression_is_valid_and_its_selectors_have_data(prom: Prom) -> None:
    missing = []
    for a in alerting.alerts(DEFAULT_CONFIG):
        prom.result(a.expr)  # valid on the live server (firing or not)
        for sel in promql.metric_selectors(a.expr):
            if sel.split("{", 1)[0] in ABSENT_IN_DEMO:
                continue
            if not prom.result(sel):
                missing.append((a.name, sel))
    assert not missing, missing


def test_exporter_absent_alert_is_silent(prom: Prom) -> None:
    assert not prom.result('ALERTS{alertname="ZarozExporterAbsent"}')


# --- Dashboards (written by the dashboards work in dashboards/json/*.json) --------------------

# Grafana's built-in variables, with values that suit a 1 s scrape and a minute of data.
BUILTINS = {
    "__rate_interval": "1m", "__interval": "5s", "__interval_ms": "5000", "__range": "1m",
    "__range_s": "60", "__range_ms": "60000", "__auto_interval": "5s",
}
_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")


def _targets(node: Any) -> Iterator[tuple[str, str]]:
    """(panel title, expr) of every target, nested rows included."""
    if isinstance(node, dict):
        for t in node.get("targets", []) or []:
            if isinstance(t, dict) and t.get("expr"):
                yield str(node.get("title", "?")), str(t["expr"])
        for v in node.values():
            if isinstance(v, (dict, list)):
                yield from _targets(v)
    elif isinstance(node, list):
        for v in node:
            yield from _targets(v)


def _variable_values(p: Prom, dashboard: dict[str, Any]) -> dict[str, str]:
    """A concrete value per template variable: the first the demo has for a label_values()
    query, else the variable's current or first option, else `.+`-style any value."""
    values = dict(BUILTINS)
    for var in (dashboard.get("templating") or {}).get("list", []):
        name = var.get("name")
        if not name:
            continue
        q = var.get("query")
        q = q.get("query", "") if isinstance(q, dict) else str(q or "")
        m = re.search(r"label_values\((?:(.*),\s*)?(\w+)\)\s*$", q.strip())
        value = None
        if m:
            params = {"match[]": m.group(1)} if m.group(1) else {}
            url = f"{p.base}/api/v1/label/{m.group(2)}/values?" + urllib.parse.urlencode(params)
            found = get(url)["data"]
            value = found[0] if found else None
        if value is None:
            cur = (var.get("current") or {}).get("value")
            value = cur[0] if isinstance(cur, list) and cur else cur
        if value in (None, "", "$__all"):
            value = ".*"
        values[name] = str(value)
    return values


def _substitute(expr: str, values: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        assert name in values, f"unknown dashboard variable ${name} in {expr}"
        return values[name]

    return _VAR.sub(sub, expr)


def test_every_dashboard_query_returns_data(prom: Prom) -> None:
    files = sorted(DASHBOARDS.glob("*.json"))
    assert files, "no dashboards/json/*.json: run python -m tools.gen"
    boards = {}
    for f in files:
        dash = json.loads(f.read_text())
        boards[f.name] = dash.get("dashboard", dash)
    count, failures = query_failures(prom, boards)
    assert count, "dashboards have no query targets"
    assert not failures, "\n".join(map(str, failures))


def query_failures(prom: Any, boards: dict[str, dict[str, Any]]
                   ) -> tuple[int, list[tuple[str, str, str, Any]]]:
    """Run every panel query of `boards` (variables substituted with values Prometheus has)
    on `prom`: (queries run, those that failed or found no data where the demo has some)."""
    failures = []
    count = 0
    for name, dash in boards.items():
        values = _variable_values(prom, dash)
        for title, raw in _targets(dash):
            count += 1
            expr = _substitute(raw, values)
            body = prom.query(expr)
            if body.get("status") != "success":
                failures.append((name, title, expr, body.get("error")))
            elif (not body["data"]["result"]
                  and not promql.metric_names(expr) <= ABSENT_IN_DEMO):
                failures.append((name, title, expr, "no data"))
    return count, failures
