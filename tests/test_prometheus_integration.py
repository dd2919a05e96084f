"""A real Prometheus scraping the demo with the generated rules: every query must work on data.

promtool tests prove the alert logic on synthetic series; this proves the rules and dashboard
queries match what the exporter really exposes (names, labels, `le` spelling) and evaluate
without errors on a real server.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from alerts import alerting, recording, render
from alerts.config import DEFAULT_CONFIG
from tests.components import require, start_prometheus, stop_process
from tests.dashqueries import ABSENT_IN_DEMO, classic_boards, query_failures, start_demo
from tests.promapi import Prom, get, ok, wait
from tests.serving import free_port
from tools import promql

ROOT = Path(__file__).resolve().parent.parent
JOB = "zaroz-exporter"
# Simulated seconds per wall second: enough units start, allocate and drain within seconds.
TIME_SCALE = 20.0
CLUSTER = "demo-cluster"


@dataclass
class Demo:
    port: int
    process: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    port = free_port()
    process = start_demo(TIME_SCALE, f"127.0.0.1:{port}", "--rate", "1", "--history", "60")
    try:
        yield Demo(port, process)
    finally:
        stop_process(process)


@pytest.fixture(scope="module")
def prom(demo: Demo) -> Iterator[Prom]:
    prometheus = require("prometheus")
    exporter_port, prom_port = demo.port, free_port()
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

def test_every_dashboard_query_returns_data(prom: Prom, demo: Demo) -> None:
    count, failures = query_failures(prom, classic_boards(), demo=demo.process)
    assert count, "dashboards have no query targets"
    assert not failures, "\n".join(map(str, failures))


