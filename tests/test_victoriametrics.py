"""VictoriaMetrics 1.145 single-node scraping one demo `serve` (its own `-promscrape.config`) as
text and as OpenMetrics (exemplars included), every dashboard panel run on its Prometheus API
with no error and data wherever Prometheus 2.x has data, and vmalert evaluating every generated
rule group against it (recording results written back) with no rule in error.

What is not tested, and why: a protobuf scrape (the scrape config offers no protocol choice and
the scraper's own Accept header gets text), so no native histograms from a scrape (1.145 takes
native histograms through remote write and OTLP, which `serve` does not speak; it stores the
classic buckets); exemplars are scraped without error, but 1.145 has no query API we found to
read them back.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from alerts import alerting, recording, render
from alerts.config import DEFAULT_CONFIG
from exporter.sinks.metrics.exposition import OPENMETRICS_TYPE
from tests.components import VICTORIA_METRICS, VMALERT, require_cached, stop_process
from tests.dashqueries import classic_boards, query_failures, start_demo
from tests.promapi import Prom, get, ok, wait
from tests.serving import free_port

ROOT = Path(__file__).resolve().parent.parent
TIME_SCALE = 5.0
# job -> the Accept header it sends (VictoriaMetrics' own when None).
JOBS = {"text": None, "openmetrics": "application/openmetrics-text;version=1.0.0"}


@dataclass
class Stack:
    vm: Prom
    vmalert: str
    logs: list[Path]
    since: int  # victoria-metrics' log length once both jobs were up: before, start-up
    demo: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    vm_bin, vmalert_bin = require_cached(VICTORIA_METRICS), require_cached(VMALERT)
    demo_port, vm_port, alert_port = free_port(), free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="zaroz-vm-") as tmp_dir:
        tmp = Path(tmp_dir)
        jobs = []
        for job, accept in JOBS.items():
            cfg: dict[str, Any] = {"job_name": job, "static_configs": [
                {"targets": [f"127.0.0.1:{demo_port}"], "labels": {"cluster": job}}]}
            if accept:
                cfg["headers"] = [f"Accept: {accept}"]
            else:  # what the dashboards select on: the exporter's job name
                cfg["relabel_configs"] = [{"target_label": "job",
                                           "replacement": "zaroz-exporter"}]
            jobs.append(cfg)
        (tmp / "scrape.yml").write_text(json.dumps({
            "global": {"scrape_interval": "5s", "scrape_timeout": "5s"},
            "scrape_configs": jobs}))
        logs = [tmp / "vm.log", tmp / "vmalert.log"]
        demo = start_demo(TIME_SCALE, f"127.0.0.1:{demo_port}", "--rate", "1", "--history", "30")
        procs.append(demo)
        vm = f"http://127.0.0.1:{vm_port}"
        procs.append(subprocess.Popen(
            [vm_bin, f"-httpListenAddr=127.0.0.1:{vm_port}", f"-storageDataPath={tmp}/vm",
             f"-promscrape.config={tmp}/scrape.yml", "-search.latencyOffset=1s",
             "-loggerLevel=WARN", "-search.disableCache"],
            stdout=subprocess.DEVNULL, stderr=logs[0].open("wb")))
        rules = [str(render.RULES_DIR / n) for n in render.RULE_FILES]
        procs.append(subprocess.Popen(
            [vmalert_bin, *(f"-rule={r}" for r in rules), f"-datasource.url={vm}",
             f"-remoteWrite.url={vm}", "-notifier.blackhole", "-evaluationInterval=5s",
             f"-httpListenAddr=127.0.0.1:{alert_port}", "-loggerLevel=WARN",
             "-remoteWrite.flushInterval=1s"],
            stdout=subprocess.DEVNULL, stderr=logs[1].open("wb")))
        try:
            p = Prom(vm)
            alert = f"http://127.0.0.1:{alert_port}"
            wait("victoria-metrics ready", lambda: ok(f"{vm}/health"), 30,
                 lambda: logs[0].read_text()[-2000:])
            wait("vmalert ready", lambda: ok(f"{alert}/health"), 30,
                 lambda: logs[1].read_text()[-2000:])
            wait("both jobs up", lambda: len(p.result("up == 1")) == len(JOBS), 240,
                 lambda: get(f"{vm}/api/v1/targets")["data"]["activeTargets"])
            since = len(logs[0].read_text())
            wait("demo's history replayed", lambda: p.result(
                'count(count by (workload) (zaroz_events_total{cluster="text"})) == 3'), 90)
            names = sorted(recording.recording_names())
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not all(
                    p.result(f'{n}{{cluster="text"}}') for n in names):
                time.sleep(2)
            yield Stack(p, alert, logs, since, demo)
        finally:
            for proc in reversed(procs):
                stop_process(proc)


def test_both_formats_scraped_with_the_same_series(stack: Stack) -> None:
    p = stack.vm
    targets = get(f"{p.base}/api/v1/targets")["data"]["activeTargets"]
    assert {t["labels"]["cluster"] for t in targets} == set(JOBS)
    for t in targets:
        assert t["health"] == "up" and not t["lastError"], t

    def series(job: str) -> set[str]:
        q = urllib.parse.urlencode({"match[]": f'{{cluster="{job}"}}',
                                    "start": time.time() - 60})
        # What the scrape stored: vmalert's recorded series (`level:metric:op`) follow the
        # rules' inputs, and a ratio is absent for a job while its denominator is zero there.
        return {r["__name__"] for r in get(f"{p.base}/api/v1/series?{q}")["data"]
                if ":" not in r["__name__"]}

    text = series("text")
    assert "zaroz_events_total" in text and "zaroz_unit_ready_seconds_bucket" in text
    # OpenMetrics' counters keep their _total on the sample; `# EOF`, `# UNIT` and exemplars
    # are read without a series of their own.
    assert series("openmetrics") == text, series("openmetrics") ^ text
    log = stack.logs[0].read_text()[stack.since:]  # before: `serve` not listening yet
    assert not re.search(r"(?i)cannot parse|unexpected|error", log), log[-3000:]


def test_openmetrics_exemplars_are_offered_and_read_without_error(stack: Stack) -> None:
    """The OpenMetrics job's scrapes carry exemplars (asked for the same way, they are in the
    answer); VictoriaMetrics keeps the samples and drops the exemplars."""
    import urllib.request

    target = get(f"{stack.vm.base}/api/v1/targets")["data"]["activeTargets"][0]["scrapeUrl"]
    req = urllib.request.Request(target, headers={"Accept": JOBS["openmetrics"] or ""})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.headers["Content-Type"] == OPENMETRICS_TYPE
        body = r.read().decode()
    assert re.search(r'_bucket\{[^}]*\} \d+ # \{trace_id="[0-9a-f]{32}",span_id="[0-9a-f]{16}"\}',
                     body)
    assert stack.vm.result('zaroz_unit_ready_seconds_bucket{cluster="openmetrics"}')


def test_every_dashboard_query_runs_with_data(stack: Stack) -> None:
    count, failures = query_failures(stack.vm, classic_boards(), "text", demo=stack.demo)
    assert count > 50
    assert not failures, "\n".join(map(str, failures))


def test_vmalert_evaluates_every_rule_without_error(stack: Stack) -> None:
    groups = get(f"{stack.vmalert}/api/v1/rules")["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    names = {r["name"] for r in rules}
    assert recording.recording_names() <= names
    assert {a.name for a in alerting.alerts(DEFAULT_CONFIG)} <= names
    bad = [(r["name"], r.get("lastError")) for r in rules
           if r.get("lastError") or r.get("health", "ok") != "ok"]
    assert not bad, bad
    # Every recording rule wrote its result back, kept the cluster label.
    empty = [n for n in sorted(recording.recording_names())
             if not stack.vm.result(f'{n}{{cluster="text"}}')]
    assert not empty, f"recording rules without data on VictoriaMetrics: {empty}"
    log = stack.logs[1].read_text()
    assert not re.search(r"(?i)\berror\b", log), log[-3000:]
