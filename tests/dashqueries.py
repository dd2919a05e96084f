"""Every dashboard panel query run on a real server that scraped the demo (Prometheus 2.x and 3.5,
VictoriaMetrics): one way to pick the variables' values, substitute them and judge the answers,
shared by each server's test.

The demo runs until its fixture stops it: a demo that ended on its own `--duration` while its
queries still ran would leave every query empty, which reads as a dashboard defect. Its
duration is therefore only a bound for a process left behind, and the queries check it is still
running before and after they run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from exporter import catalog
from tests.promapi import get
from tools import promql

ROOT = Path(__file__).resolve().parent.parent
DASHBOARDS = ROOT / "dashboards" / "json"
# Only a bound for a demo its fixture failed to stop: every fixture stops its demo when done.
DEMO_BOUND_SECONDS = 3600
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

# Grafana's built-in variables, with values that suit a 1 s scrape and a minute of data.
BUILTINS = {
    "__rate_interval": "1m", "__interval": "5s", "__interval_ms": "5000", "__range": "1m",
    "__range_s": "60", "__range_ms": "60000", "__auto_interval": "5s",
}
_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")


class Queries(Protocol):
    """A Prometheus-compatible query API (tests.promapi.Prom)."""

    base: str

    def query(self, expr: str) -> dict[str, Any]: ...


def start_demo(time_scale: float, listen: str, *args: str) -> subprocess.Popen[bytes]:
    """The demo serving on `listen`, until stopped (`DEMO_BOUND_SECONDS` at most)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", DEMO, str(time_scale), "--listen", listen,
         "--duration", str(DEMO_BOUND_SECONDS), *args],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def assert_running(demo: subprocess.Popen[bytes]) -> None:
    assert demo.poll() is None, (
        f"the demo exited (code {demo.returncode}) before its queries were judged: its series "
        "are gone, so an empty answer says nothing about the dashboards")


def classic_boards() -> dict[str, dict[str, Any]]:
    """The generated dashboards/json/*.json, by file name."""
    files = sorted(DASHBOARDS.glob("*.json"))
    assert files, "no dashboards/json/*.json: run python -m tools.gen"
    boards = {}
    for f in files:
        dash = json.loads(f.read_text())
        boards[f.name] = dash.get("dashboard", dash)
    return boards


def targets(node: Any) -> Iterator[tuple[str, str]]:
    """(panel title, expr) of every target, nested rows included."""
    if isinstance(node, dict):
        for t in node.get("targets", []) or []:
            if isinstance(t, dict) and t.get("expr"):
                yield str(node.get("title", "?")), str(t["expr"])
        for v in node.values():
            if isinstance(v, (dict, list)):
                yield from targets(v)
    elif isinstance(node, list):
        for v in node:
            yield from targets(v)


def variable_values(p: Queries, dashboard: dict[str, Any]) -> dict[str, str]:
    """A concrete value per template variable: the first the server has for a label_values()
    query, else the variable's current or first option, else `.*`."""
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


def substitute(expr: str, values: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        assert name in values, f"unknown dashboard variable ${name} in {expr}"
        return values[name]

    return _VAR.sub(sub, expr)


def query_failures(p: Queries, boards: dict[str, dict[str, Any]], cluster: str | None = None,
                   *, demo: subprocess.Popen[bytes] | None = None, notes: bool = False
                   ) -> tuple[int, list[tuple[Any, ...]]]:
    """Run every panel query of `boards` on `p`, the variables substituted with values it has
    (`cluster` picking one job where given): (queries run, those that failed, found no data
    where the demo has some, or with `notes` came with warnings or infos). With `demo`, it must
    be running before and after."""
    if demo is not None:
        assert_running(demo)
    failures: list[tuple[Any, ...]] = []
    count = 0
    for name, dash in boards.items():
        values = variable_values(p, dash)
        if cluster is not None:
            values["cluster"] = cluster
        for title, raw in targets(dash):
            count += 1
            expr = substitute(raw, values)
            body = p.query(expr)
            if body.get("status") != "success":
                failures.append((name, title, expr, body.get("error")))
            elif notes and (body.get("warnings") or body.get("infos")):
                failures.append((name, title, expr, body.get("warnings"), body.get("infos")))
            elif (not body["data"]["result"]
                  and not promql.metric_names(expr) <= ABSENT_IN_DEMO):
                failures.append((name, title, expr, "no data"))
    if demo is not None:
        assert_running(demo)
    return count, failures
