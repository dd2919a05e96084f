"""Two real Prometheus 2.42 servers, one with `--enable-feature=native-histograms` (it asks for the
protobuf exposition) and one without (text, as today), scraping the demo and an exporter that
tails a finite simulator log whose ground truth is known.

Native quantiles of readiness must be within the schema's relative error of the exact quantiles
of the simulator's durations; the classic-bucket quantiles are printed beside them (run with -s).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

import dashboards
from alerts import recording, render
from exporter import catalog
from tests.components import require, start_prometheus, stop_process
from tests.dashqueries import query_failures, start_demo
from tests.promapi import Prom, get, ok, wait
from tests.serving import free_port
from tests.simlogs import finite_logs

ROOT = Path(__file__).resolve().parent.parent
TIME_SCALE = 20.0
RUN_SECONDS = 400  # the log server's bound: the fixture stops it when done
SCHEMA = 3
# The finite log: 3 workloads, 10 simulated minutes at one unit a second each (~1,600 units).
LOG = (11, 3, 600, 1.0)
QUANTILES = (0.5, 0.95, 0.99)
HISTOGRAMS = [m.name for m in catalog.METRICS if m.kind is catalog.Kind.HISTOGRAM]


def _config(path: Path, targets: dict[str, int], rules: list[str]) -> None:
    path.write_text(json.dumps({
        "global": {"scrape_interval": "4s", "scrape_timeout": "4s", "evaluation_interval": "4s"},
        "rule_files": rules,
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            for job, port in targets.items()
        ],
    }))


@pytest.fixture(scope="module")
def proms() -> Iterator[tuple[Prom, Prom]]:
    """(native, text): the same targets scraped by both servers."""
    prometheus = require("prometheus")
    demo_port, logs_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="zaroz-native-") as tmp:
        targets = {"demo": demo_port, "logs": logs_port}
        native_rules = [str(render.NATIVE_RULES_DIR / n) for n in render.RULE_FILES]
        configs = {"native": Path(tmp) / "native.yml", "text": Path(tmp) / "text.yml"}
        _config(configs["native"], targets, native_rules)
        _config(configs["text"], targets, [])
        try:
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
            procs.append(start_demo(TIME_SCALE, f"127.0.0.1:{demo_port}", "--rate", "1",
                                    "--native-histogram-schema", str(SCHEMA)))
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "tests.logserver", *map(str, LOG), str(RUN_SECONDS),
                 "--listen", f"127.0.0.1:{logs_port}", "--native-histogram-schema", str(SCHEMA)],
                cwd=ROOT, env=env, **quiet))
            servers = []
            for name, flags in (("native", ["--enable-feature=native-histograms"]), ("text", [])):
                port = free_port()
                procs.append(start_prometheus(prometheus, configs[name], f"{tmp}/{name}", port,
                                              *flags))
                servers.append(Prom(f"http://127.0.0.1:{port}"))
            for p in servers:
                wait("prometheus ready", lambda p=p: ok(f"{p.base}/-/ready"), 20)
                targets = f"{p.base}/api/v1/targets"
                wait(f"both targets up: {targets}", lambda p=p: len(p.result("up == 1")) == 2,
                      90, lambda t=targets: [(x["scrapeUrl"], x["lastError"]) for x in
                                             get(t)["data"]["activeTargets"]])
            yield servers[0], servers[1]
        finally:
            for proc in reversed(procs):
                stop_process(proc)


def _one(p: Prom, expr: str) -> float:
    res = p.result(expr)
    assert len(res) == 1, f"{expr}: {res}"
    return float(res[0]["value"][1])


def exact_quantile(sorted_ns: list[int], q: float) -> float:
    """The nearest-rank quantile, in seconds: the value whose rank histogram_quantile seeks."""
    return sorted_ns[max(0, math.ceil(q * len(sorted_ns)) - 1)] / 1e9


def test_native_readiness_quantiles_within_the_schema_error_of_ground_truth(proms):
    native, text = proms
    _, truth = finite_logs(*LOG[:2], seconds=LOG[2], rate=LOG[3])
    durations = sorted(d for ds in truth.ready.values() for d in ds)
    sel = 'zaroz_unit_ready_seconds{job="logs"}'
    # Wait until both have scraped the whole log applied.
    wait("the log applied and scraped natively", lambda: native.result(
        f"histogram_count(sum({sel})) == {len(durations)}"), 90)
    wait("the log applied and scraped as text", lambda: text.result(
        f'sum(zaroz_unit_ready_seconds_count{{job="logs"}}) == {len(durations)}'), 90)
    assert _one(native, f"histogram_sum(sum({sel}))") == pytest.approx(
        sum(durations) / 1e9, rel=1e-9)
    bound = 2 ** (2.0**-SCHEMA) - 1  # a bucket's width relative to its lower edge
    rows = [f"readiness over {len(durations)} units (schema {SCHEMA}: bound {bound:.2%})",
            f"{'q':>5} {'exact s':>10} {'native s':>10} {'err':>7} {'classic s':>10} {'err':>7}"]
    worst = 0.0
    for q in QUANTILES:
        exact = exact_quantile(durations, q)
        nat = _one(native, f"histogram_quantile({q}, sum({sel}))")
        classic = _one(text, f'histogram_quantile({q}, sum by (le) '
                             f'(zaroz_unit_ready_seconds_bucket{{job="logs"}}))')
        err, cerr = nat / exact - 1, classic / exact - 1
        worst = max(worst, abs(err))
        rows.append(f"{q:>5} {exact:>10.3f} {nat:>10.3f} {err:>+7.2%} {classic:>10.3f} "
                    f"{cerr:>+7.2%}")
    print("\n" + "\n".join(rows))
    assert worst <= bound, "\n".join(rows)


def _labelsets(p: Prom, expr: str) -> set[tuple[tuple[str, str], ...]]:
    return {tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__"))
            for r in p.result(expr)}


# Range functions below, not instant selectors: on this small shared machine a scrape can time
# out, and a failed scrape marks the target's series stale at once.
def test_native_series_answer_histogram_functions_on_the_demo(proms):
    native, text = proms
    wait("demo readiness observed", lambda: native.result(
        'histogram_count(sum(rate(zaroz_unit_ready_seconds{job="demo"}[10m]))) > 0'), 120,
        lambda: get(f"{native.base}/api/v1/targets")["data"]["activeTargets"])
    for name in HISTOGRAMS:
        # Every histogram the text server sees as classic, the native server sees as native
        # (both over the whole run; retried while a series new to one is not yet in the other).
        def same(name: str = name) -> bool:
            classic = _labelsets(text, f'rate({name}_count{{job="demo"}}[10m])')
            nat = _labelsets(native, f'histogram_count(rate({name}{{job="demo"}}[10m]))')
            return classic == nat
        wait(f"{name}: the same series natively and as text", same, 45,
              lambda name=name: (_labelsets(text, f'rate({name}_count{{job="demo"}}[10m])'),
                                 _labelsets(native,
                                            f'histogram_count(rate({name}{{job="demo"}}[10m]))')))
    q = native.result('histogram_quantile(0.99, sum by (workload) '
                      '(rate(zaroz_unit_ready_seconds{job="demo"}[10m])))')
    assert q and all(math.isfinite(float(r["value"][1])) for r in q if r["value"][1] != "NaN")
    assert any(float(r["value"][1]) > 0 for r in q)
    assert native.result('histogram_sum(rate(zaroz_unit_ready_seconds{job="demo"}[10m])) > 0')
    assert native.result('histogram_count(rate(zaroz_unitsignal_ready_seconds{job="demo"}[10m]))')


def test_text_scrape_is_as_before_and_both_see_the_same_other_series(proms):
    native, text = proms
    # Without the feature flag: classic series only, no native ones.
    assert text.result(
        'count_over_time(zaroz_unit_ready_seconds_bucket{job="demo",le="+Inf"}[10m])')
    assert not text.result('histogram_count(rate(zaroz_unit_ready_seconds{job="demo"}[10m]))')

    def names(p: Prom) -> set[str]:
        """Series names of the demo job over the last minute (the series API: no staleness)."""
        q = urllib.parse.urlencode({"match[]": '{job="demo"}', "start": time.time() - 60})
        found = {r["__name__"] for r in get(f"{p.base}/api/v1/series?{q}")["data"]}
        return {n for n in found if not n.startswith(tuple(HISTOGRAMS))}

    # Every counter, gauge and per-object family arrives through protobuf as through text.
    want = names(text)
    assert "zaroz_unitsignal_ready" in want and "zaroz_events_total" in want
    wait("the same other families", lambda: names(native) == names(text), 45,
          lambda: names(native) ^ names(text))


def test_native_rules_are_healthy_and_record_on_the_demo(proms):
    native, _ = proms
    names = sorted(recording.recording_names())
    wait("every native recording rule has data", lambda: all(native.result(n) for n in names),
          90, lambda: [n for n in names if not native.result(n)])
    rules = [r for g in get(f"{native.base}/api/v1/rules")["data"]["groups"]
             for r in g["rules"]]
    assert recording.recording_names() <= {r["name"] for r in rules}
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad


def test_native_dashboard_queries_return_data(proms):
    native, _ = proms
    boards = dashboards.generate_native()
    assert boards
    count, failures = query_failures(native, boards)
    assert count
    assert not failures, "\n".join(map(str, failures))

