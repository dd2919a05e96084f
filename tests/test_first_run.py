"""What a new user trips over first: the start-up log says which families are not exported and
why, `--help` lists each command once, the overview says how its cards are ordered (and orders
them so), and a skipped test's reason names the test."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from exporter import catalog
from exporter.commands import serve
from exporter.overview import page
from exporter.overview.collect import overview
from exporter.overview.history import History
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.selection import HIDDEN_BECAUSE, FamilyFilter
from exporter.wiring.events import Pipeline

pytest_plugins = ["pytester"]


def _startup_lines(caplog: pytest.LogCaptureFixture, families: FamilyFilter) -> dict[str, str]:
    caplog.clear()
    caplog.set_level(logging.INFO, logger="exporter.commands.serve")
    serve._select_families(SimpleNamespace(registry=Registry()), families)  # type: ignore[arg-type]
    return {r.getMessage(): r.__dict__["families"] for r in caplog.records
            if r.getMessage().startswith("metric families not exported")}


def test_the_startup_line_names_the_opt_in_family_and_why(caplog) -> None:
    opt_in = [m.name for m in catalog.METRICS if m.opt_in]
    assert opt_in  # zaroz_unitsignal_status_seq
    lines = _startup_lines(caplog, FamilyFilter.parse())
    assert lines == {f"metric families not exported ({HIDDEN_BECAUSE['opt_in']})":
                     ",".join(opt_in)}
    assert "--metric-opt-in-list" in HIDDEN_BECAUSE["opt_in"]
    assert _startup_lines(caplog, FamilyFilter.parse(opt_in=[".*"])) == {}


def test_every_family_a_list_hides_is_named_once_with_its_reason(caplog) -> None:
    lines = _startup_lines(caplog, FamilyFilter.parse(deny=["^zaroz_route_"]))
    denied = lines[f"metric families not exported ({HIDDEN_BECAUSE['denylist']})"].split(",")
    assert denied == [m.name for m in catalog.METRICS if m.name.startswith("zaroz_route_")]
    lines = _startup_lines(caplog, FamilyFilter.parse(allow=["^zaroz_events_total$"]))
    named = [n for families in lines.values() for n in families.split(",")]
    assert sorted(named) == sorted(m.name for m in catalog.METRICS
                                   if m.name != "zaroz_events_total")
    assert set(lines) == {f"metric families not exported ({HIDDEN_BECAUSE[k]})"
                          for k in ("opt_in", "allowlist")}


def test_help_lists_each_command_once() -> None:
    out = subprocess.run([sys.executable, "-m", "exporter.cli", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for command in ("serve", "replay", "demo"):
        listed = re.findall(rf"^\s+{command}\s+\S", out, flags=re.M)
        assert len(listed) == 1, (command, out)
    assert "(default)" in out


def test_the_overview_says_its_cards_are_worst_first_and_orders_them_so() -> None:
    p = Pipeline()
    h = History(p.registry, step=10.0)
    h.tick(0.0)
    for wl, seconds in (("wl-fast", 0.2), ("wl-slow", 90.0), ("wl-mid", 5.0)):
        for i in range(20):
            p.workload(wl).obs.ready(f"u{i}", int(seconds * 1e9))  # type: ignore[attr-defined]
    h.tick(10.0)
    html = page.render(overview(p.registry, h, lambda: (True, "ok"), 10.0), {})
    heading = re.search(r"<h2>Workloads (.*?)</h2>", html)
    assert heading and "worst first: slowest readiness p95" in heading.group(1)
    order = re.findall(r'data-workload="([^"]+)"', html)
    assert order == ["wl-slow", "wl-mid", "wl-fast"]


SKIPPING = """
from tests.components import require

def test_needs_a_tool():
    require("no-such-tool-for-zaroz")
"""


def test_a_skip_for_a_missing_component_names_the_test_and_points_at_it(pytester, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_tool=SKIPPING)
    result = pytester.runpytest_inprocess("-ra", "-p", "no:cacheprovider", "-p", "no:asyncio",
                                         "-p", "no:cloudcoil")
    result.assert_outcomes(skipped=1)
    line = next(x for x in result.outlines if x.startswith("SKIPPED"))
    assert "components.py" not in line
    assert re.match(r"SKIPPED \[1\] test_tool\.py:3: test_tool\.py::test_needs_a_tool: "
                    r"no-such-tool-for-zaroz is not installed", line), line


def test_under_ci_a_missing_component_fails_naming_the_test(pytester, monkeypatch):
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(test_tool=SKIPPING)
    result = pytester.runpytest_inprocess("-ra", "-p", "no:cacheprovider", "-p", "no:asyncio",
                                         "-p", "no:cloudcoil")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["FAILED test_tool.py::test_needs_a_tool - Failed: "
                                 "test_tool.py::test_needs_a_tool: no-such-tool-for-zaroz*"])
