"""Prometheus 3.5 LTS (native histograms on) scraping one demo `serve`: each scrape protocol it may
negotiate brings the target up with the Content-Type it asked for and nothing in its log; every
panel of the dashboards (classic and native) runs with data wherever Prometheus 2.x has data
(`tests/test_prometheus_integration.py`'s rule: only queries reading series the demo cannot show
may be empty); every rule is healthy and every recording rule records.

One Prometheus, one `serve`: each job scrapes the same `serve` with its own `scrape_protocols`
and its own `cluster` label, so the dashboards' `cluster` variable picks one job. The protocol
jobs scrape through a transparent proxy that records the exact Accept header Prometheus sent and
the Content-Type `serve` answered. The jobs without protobuf send what a Prometheus 3.5 without
native histograms sends (its default `scrape_protocols` is that list).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

import dashboards
from alerts import recording, render
from exporter.sinks.metrics.exposition import OPENMETRICS_TYPE, PROTOBUF_TYPE, TEXT_TYPE
from tests.components import PROMETHEUS_3, require_cached, start_prometheus, stop_process
from tests.dashqueries import assert_running, classic_boards, query_failures, start_demo, targets
from tests.promapi import Prom, get, ok, wait
from tests.serving import free_port
from tools import promql

ROOT = Path(__file__).resolve().parent.parent
# Lower than the 2.x test's 20: the demo renders every scrape of ten jobs on a shared machine.
TIME_SCALE = 5.0
# Prometheus 3.5's default scrape_protocols with native histograms on, and without.
NATIVE_DEFAULT = ["PrometheusProto", "OpenMetricsText1.0.0", "OpenMetricsText0.0.1",
                  "PrometheusText1.0.0", "PrometheusText0.0.4"]
CLASSIC_DEFAULT = NATIVE_DEFAULT[1:]
# What each protocol must be answered with: Prometheus 3.5 picks its parser by this media type.
ANSWER = {"PrometheusProto": PROTOBUF_TYPE, "OpenMetricsText1.0.0": OPENMETRICS_TYPE,
          "OpenMetricsText0.0.1": OPENMETRICS_TYPE, "PrometheusText1.0.0": TEXT_TYPE,
          "PrometheusText0.0.4": TEXT_TYPE}
# job -> (scrape_protocols, or None for the default; extra scrape config). The first two are
# what the dashboards read: "classic" as text/OpenMetrics, "native" as the flag's default.
JOBS: dict[str, tuple[list[str] | None, dict[str, Any]]] = {
    "classic": (CLASSIC_DEFAULT, {}),
    "native": (None, {}),
    "p-default": (None, {}),
    "p-classic-default": (CLASSIC_DEFAULT, {}),
    **{f"p-{p}": ([p], {}) for p in ANSWER},
    # Used by Prometheus only when an answer has no or an unknown Content-Type: never here.
    "p-fallback": (["PrometheusText1.0.0"], {"fallback_scrape_protocol": "PrometheusText0.0.4"}),
}
PROBES = [j for j in JOBS if j.startswith("p-")]


@dataclass
class Tap:
    """A transparent proxy in front of `serve`: records (Accept, Content-Type) per probe."""

    upstream: str
    seen: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        tap = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                headers = {k: v for k in ("Accept", "Accept-Encoding")
                           if (v := self.headers.get(k))}
                req = urllib.request.Request(f"{tap.upstream}/metrics", headers=headers)
                with urllib.request.urlopen(req, timeout=30) as r:
                    body, ctype, enc = r.read(), r.headers["Content-Type"], \
                        r.headers.get("Content-Encoding")
                probe = query.get("probe", ["?"])[0]
                tap.seen.setdefault(probe, []).append((headers.get("Accept", ""), ctype))
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                if enc:
                    self.send_header("Content-Encoding", enc)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@dataclass
class Stack:
    prom: Prom
    tap: Tap
    log: Path
    since: int  # the log's length once every job was up: what came before is start-up
    demo: subprocess.Popen[bytes]


def _job(name: str, target: str, protocols: list[str] | None, extra: dict[str, Any]
         ) -> dict[str, Any]:
    job: dict[str, Any] = {"job_name": name, "static_configs": [
        {"targets": [target], "labels": {"cluster": name}}], **extra}
    if protocols is not None:
        job["scrape_protocols"] = protocols
    if not name.startswith("p-"):  # what the dashboards select on: the exporter's job name
        job["relabel_configs"] = [{"target_label": "job", "replacement": "zaroz-exporter"}]
    else:
        job["params"] = {"probe": [name]}
        job["scrape_interval"] = job["scrape_timeout"] = "15s"
    return job


def _rule_files(tmp: Path) -> list[str]:
    """The classic rules, and of the native ones those that read native histograms (the rest
    are the classic rules again): classic and native jobs record side by side, each from its
    own series, as in a Prometheus that scrapes both kinds of target."""
    files = [str(render.RULES_DIR / n) for n in render.RULE_FILES]
    classic = {(r["record"], r["expr"]) for n in render.RULE_FILES for g in
               yaml.safe_load((render.RULES_DIR / n).read_text())["groups"]
               for r in g["rules"] if "record" in r}
    doc = yaml.safe_load((render.NATIVE_RULES_DIR / "recording.yaml").read_text())
    groups = []
    for g in doc["groups"]:
        rules = [r for r in g["rules"] if (r["record"], r["expr"]) not in classic]
        if rules:
            groups.append({**g, "name": f"{g['name']}-native", "rules": rules})
    (tmp / "native.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return [*files, str(tmp / "native.yaml")]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    prometheus = require_cached(PROMETHEUS_3)
    demo_port, tap_port, prom_port = free_port(), free_port(), free_port()
    tap = Tap(f"http://127.0.0.1:{demo_port}")
    proxy = ThreadingHTTPServer(("127.0.0.1", tap_port), tap.handler())
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="zaroz-prom3-") as tmp_dir:
        tmp = Path(tmp_dir)
        jobs = [_job(n, f"127.0.0.1:{tap_port if n.startswith('p-') else demo_port}", p, x)
                for n, (p, x) in JOBS.items()]
        (tmp / "prometheus.yml").write_text(json.dumps({
            "global": {"scrape_interval": "10s", "scrape_timeout": "10s",
                       "evaluation_interval": "5s"},
            "rule_files": _rule_files(tmp), "scrape_configs": jobs}))
        demo = start_demo(TIME_SCALE, f"127.0.0.1:{demo_port}", "--rate", "1", "--history", "30")
        log = tmp / "prometheus.log"
        server = start_prometheus(
            prometheus, tmp / "prometheus.yml", tmp / "data", prom_port,
            "--enable-feature=native-histograms,exemplar-storage", stderr=log.open("wb"),
            log_level="debug")
        try:
            p = Prom(f"http://127.0.0.1:{prom_port}")
            wait("prometheus 3.5 ready", lambda: ok(f"{p.base}/-/ready"), 30,
                 lambda: log.read_text()[-3000:])
            wait("every job up", lambda: len(p.result("up == 1")) == len(JOBS), 240,
                 lambda: [(t["labels"]["job"], t["health"], t["lastError"]) for t in
                          get(f"{p.base}/api/v1/targets")["data"]["activeTargets"]])
            since = len(log.read_text())
            wait("demo's history replayed", lambda: p.result(
                'count(count by (workload) (zaroz_events_total{cluster="classic"})) == 3'), 60)
            # Each job on its own: a rate needs two of that job's scrapes after the demo's
            # workloads are shown, and the two jobs scrape at different phases (a wait on either
            # job's data let one job's queries run with a single sample of it).
            names = sorted(recording.recording_names())
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and not all(
                    p.result(f'{n}{{cluster="{c}"}}') for c in ("classic", "native")
                    for n in names):
                time.sleep(1)
            yield Stack(p, tap, log, since, demo)
        finally:
            stop_process(server)
            stop_process(demo)
            proxy.shutdown()


# --- Scrapes: each protocol -------------------------------------------------------------------


def _first_choice(accept: str) -> str:
    """The media type (with its parameters but q) Prometheus weighs highest in `accept`."""
    best, best_q = "", -1.0
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        q = next((float(f[2:]) for f in fields[1:] if f.startswith("q=")), 1.0)
        if q > best_q:
            best, best_q = ";".join(f for f in fields if not f.startswith("q=")), q
    return best


@pytest.mark.parametrize("job", PROBES)
def test_each_protocol_gets_its_content_type_and_the_target_is_up(stack: Stack, job: str
                                                                 ) -> None:
    protocols, _ = JOBS[job]
    target = next(t for t in get(f"{stack.prom.base}/api/v1/targets")["data"]["activeTargets"]
                  if t["labels"]["job"] == job)
    assert target["health"] == "up" and not target["lastError"], target
    seen = stack.tap.seen.get(job)
    assert seen, f"{job}: no scrape came through"
    want = ANSWER[(protocols or NATIVE_DEFAULT)[0]]
    for accept, ctype in seen:
        first = _first_choice(accept)
        assert ctype == want, (job, accept, ctype)
        # The answer is the media type asked for first (versions of a text format aside).
        assert first.split(";")[0] == want.split(";")[0], (accept, ctype)
        if want == PROTOBUF_TYPE:
            assert "encoding=delimited" in first and "proto=io.prometheus.client.MetricFamily" \
                in first, accept


def _target_lines(text: str) -> list[str]:
    """Warnings and errors, and what the scrape loop logs at debug (parse errors, dropped
    samples, exemplars or native histograms, failed scrapes)."""
    return [line for line in text.splitlines()
            if re.search(r"level=(WARN|ERROR)", line)
            or (re.search(r"level=DEBUG", line) and "source=scrape" in line)]


def test_prometheus_logs_nothing_about_any_scrape(stack: Stack) -> None:
    """Parser warnings (unknown metadata, bad exemplars, out-of-order or duplicate samples,
    dropped native histograms) are logged by 3.5 at warn or debug with the target: none."""
    text = stack.log.read_text()
    # Before every job was up, only failed scrapes of a `serve` still starting.
    early = [x for x in _target_lines(text[:stack.since]) if 'msg="Scrape failed"' not in x]
    lines = early + _target_lines(text[stack.since:])
    assert not lines, "\n".join(lines[:20])


def test_every_protocol_stores_the_same_series_and_the_same_le_values(stack: Stack) -> None:
    """However a job scraped it, 3.5 stores one set of `le` values (in its float form, e.g.
    "1.0": 3.5 normalises text and OpenMetrics; protobuf carries floats) and one set of
    non-histogram families."""
    p = stack.prom

    def les(job: str) -> set[str]:
        q = urllib.parse.urlencode({"match[]": f'zaroz_unit_ready_seconds_bucket{{job="{job}"}}'})
        return set(get(f"{p.base}/api/v1/label/le/values?{q}")["data"])

    text = les("p-PrometheusText0.0.4")
    assert "+Inf" in text and "1.0" in text, sorted(text)
    for job in ("p-OpenMetricsText1.0.0", "p-OpenMetricsText0.0.1", "p-PrometheusText1.0.0",
                "p-classic-default"):
        assert les(job) == text, job
    # Natively scraped histograms are native only, unless classic ones are kept.
    assert not les("p-PrometheusProto") and not les("p-default")
    native = 'histogram_count(last_over_time(zaroz_unit_ready_seconds{{job="{}"}}[5m]))'
    for job in ("p-PrometheusProto", "p-default"):
        assert p.result(native.format(job)), job
    assert p.result(native.format("zaroz-exporter").replace('job="', 'cluster="native",job="'))
    assert not p.result(native.format("p-PrometheusText0.0.4"))

    def families(job: str) -> set[str]:
        q = urllib.parse.urlencode({"match[]": f'{{job="{job}"}}', "start": time.time() - 120})
        return {r["__name__"] for r in get(f"{p.base}/api/v1/series?{q}")["data"]
                if "_seconds" not in r["__name__"]}

    # A family the exporter makes between two jobs' scrapes (every 15 s) is in one job before
    # the other: the sets must agree within a few scrape intervals, not at one instant.
    def apart() -> list[tuple[str, set[str]]]:
        want = families("p-PrometheusText0.0.4")
        assert "zaroz_events_total" in want
        return [(job, families(job) ^ want) for job in PROBES if families(job) != want]

    wait("every protocol's job stores the same families", lambda: not apart(), 60, apart)


def test_openmetrics_scrapes_bring_exemplars(stack: Stack) -> None:
    q = urllib.parse.urlencode({
        "query": 'zaroz_unit_ready_seconds_bucket{job="p-OpenMetricsText1.0.0"}',
        "start": 0, "end": time.time() + 86400})  # exemplars carry the event's own time
    wait("an exemplar", lambda: get(f"{stack.prom.base}/api/v1/query_exemplars?{q}")["data"],
         30)
    found = get(f"{stack.prom.base}/api/v1/query_exemplars?{q}")["data"]
    ex = found[0]["exemplars"][0]
    assert re.fullmatch(r"[0-9a-f]{32}", ex["labels"]["trace_id"]), ex


# --- Dashboards and rules -----------------------------------------------------------------


def test_every_classic_dashboard_query_has_data_on_3_5(stack: Stack) -> None:
    count, failures = query_failures(stack.prom, classic_boards(), "classic", demo=stack.demo,
                                     notes=True)
    assert count > 50
    assert not failures, "\n".join(map(str, failures))


def test_every_native_dashboard_query_has_data_on_3_5(stack: Stack) -> None:
    count, failures = query_failures(stack.prom, dashboards.generate_native(), "native",
                                     demo=stack.demo, notes=True)
    assert count
    assert not failures, "\n".join(map(str, failures))


def test_rules_are_healthy_and_record_for_both_kinds_of_job(stack: Stack) -> None:
    assert_running(stack.demo)
    p = stack.prom
    rules = [r for g in get(f"{p.base}/api/v1/rules")["data"]["groups"] for r in g["rules"]]
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad
    for cluster in ("classic", "native"):
        empty = [n for n in sorted(recording.recording_names())
                 if not p.result(f'{n}{{cluster="{cluster}"}}')]
        assert not empty, f"{cluster}: recording rules without data on 3.5: {empty}"


def test_no_dashboard_matcher_depends_on_how_a_bound_is_written() -> None:
    """Prometheus 3 stores `le` and `quantile` in float form ("1.0"), 2.x as scraped ("1" from
    text): a matcher on either value would find data on one major only."""
    boards = {**dashboards.generate(), **dashboards.generate_native()}
    count = 0
    for name, dash in boards.items():
        for title, expr in targets(dash):
            for sel in promql.metric_selectors(expr):
                count += 1
                assert not re.search(r"\b(le|quantile)\s*(=|!=|=~|!~)", sel), (name, title, sel)
    assert count > 50
