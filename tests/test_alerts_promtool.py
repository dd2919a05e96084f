"""The generated rules and the Alertmanager example, checked by Prometheus's own tools: each at
both ends of the supported range (docs/compatibility.md), the oldest (Debian bookworm's
Prometheus 2.42 and Alertmanager 0.25, on PATH) and the newest (Prometheus 3.5 LTS and
Alertmanager 0.33, from .ci/cache)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from alerts import render
from tests.components import AMTOOL_NEW, PROMTOOL_3, missing, require, require_cached

ROOT = Path(__file__).resolve().parent.parent

PROMTOOLS = ["2.42", "3.5"]
AMTOOLS = ["0.25", "0.33"]


def _version(path: str, name: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    words = (out.stdout + out.stderr).split()
    return words[2] if len(words) > 2 and words[0] == name + "," else ""


def promtool(version: str) -> str:
    """promtool `version`: 2.42 is bookworm's on PATH (.ci/run installs it), 3.5 .ci/cache's."""
    path = require_cached(PROMTOOL_3) if version == "3.5" else require("promtool")
    if not _version(path, "promtool").startswith(version + "."):
        missing(f"{path} is promtool {_version(path, 'promtool')!r}, not {version}")
    return path


def amtool(version: str) -> str:
    """amtool `version`: 0.25 is bookworm's on PATH, 0.33 .ci/cache's."""
    path = require_cached(AMTOOL_NEW) if version == "0.33" else require("amtool")
    if not _version(path, "amtool").startswith(version + "."):
        missing(f"{path} is amtool {_version(path, 'amtool')!r}, not {version}")
    return path


def _run(*cmd: str, cwd: Path = ROOT) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.parametrize("version", PROMTOOLS)
def test_promtool_check_rules(version: str) -> None:
    tool = promtool(version)
    _run(tool, "check", "rules", *(str(render.RULES_DIR / n) for n in render.RULE_FILES))
    _run(tool, "check", "rules", *(str(render.NATIVE_RULES_DIR / n) for n in render.RULE_FILES))


@pytest.mark.parametrize("version", PROMTOOLS)
@pytest.mark.parametrize("name", sorted(p.name for p in render.TESTS_DIR.glob("*.yaml")))
def test_promtool_test_rules(name: str, version: str) -> None:
    """Every alert: firing, silent, at its `for` boundary; burn-rate alerts fast and slow; the
    edges where Prometheus 2 and 3 read ranges differently (a sample at a range's start, stale
    series, a counter reset), which must give the same alerts on both."""
    _run(promtool(version), "test", "rules", name, cwd=render.TESTS_DIR)


@pytest.mark.parametrize("version", AMTOOLS)
def test_amtool_check_config(version: str) -> None:
    _run(amtool(version), "check-config", str(ROOT / "alerts" / "alertmanager.example.yml"))


@pytest.mark.parametrize("version", AMTOOLS)
def test_alertmanager_routes_by_severity(version: str) -> None:
    """critical pages, warning goes to the ticket/chat receiver, info to the null receiver."""
    tool = amtool(version)
    cfg = str(ROOT / "alerts" / "alertmanager.example.yml")
    expected = {"critical": "pager", "warning": "tickets", "info": "null"}
    for severity, receiver in expected.items():
        proc = subprocess.run(
            [tool, "config", "routes", "test", f"--config.file={cfg}",
             f"severity={severity}", "alertname=ZarozExample"],
            capture_output=True, text=True, timeout=60,
        )
        assert proc.stdout.strip() == receiver, (severity, proc.stdout, proc.stderr)


@pytest.mark.parametrize("version", AMTOOLS)
@pytest.mark.parametrize(
    "name", ["zaroz.slack.title", "zaroz.slack.text", "zaroz.email.subject", "zaroz.email.text"]
)
def test_amtool_renders_the_notification_templates(name: str, version: str) -> None:
    """alerts/templates/*.tmpl parse and render in Alertmanager's own template engine (amtool's
    example data; tests/test_alerts_e2e.py renders them on real alerts)."""
    proc = subprocess.run(
        [amtool(version), "template", "render",
         f"--template.glob={ROOT / 'alerts' / 'templates' / '*.tmpl'}",
         f'--template.text={{{{ template "{name}" . }}}}'],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip(), f"{name} rendered nothing"
