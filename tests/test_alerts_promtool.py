"""The generated rules and the Alertmanager example, checked by Prometheus's own tools."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from alerts import render
from tests.components import require

ROOT = Path(__file__).resolve().parent.parent


def _run(*cmd: str, cwd: Path = ROOT) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"


def test_promtool_check_rules() -> None:
    promtool = require("promtool")
    _run(promtool, "check", "rules", *(str(render.RULES_DIR / n) for n in render.RULE_FILES))
    _run(promtool, "check", "rules",
         *(str(render.NATIVE_RULES_DIR / n) for n in render.RULE_FILES))


@pytest.mark.parametrize("name", sorted(p.name for p in render.TESTS_DIR.glob("*.yaml")))
def test_promtool_test_rules(name: str) -> None:
    """Every alert: firing, silent, at its `for` boundary; burn-rate alerts fast and slow."""
    promtool = require("promtool")
    _run(promtool, "test", "rules", name, cwd=render.TESTS_DIR)


def test_amtool_check_config() -> None:
    amtool = require("amtool")
    _run(amtool, "check-config", str(ROOT / "alerts" / "alertmanager.example.yml"))


def test_alertmanager_routes_by_severity() -> None:
    """critical pages, warning goes to the ticket/chat receiver, info to the null receiver."""
    amtool = require("amtool")
    cfg = str(ROOT / "alerts" / "alertmanager.example.yml")
    expected = {"critical": "pager", "warning": "tickets", "info": "null"}
    for severity, receiver in expected.items():
        proc = subprocess.run(
            [amtool, "config", "routes", "test", f"--config.file={cfg}",
             f"severity={severity}", "alertname=ZarozExample"],
            capture_output=True, text=True, timeout=60,
        )
        assert proc.stdout.strip() == receiver, (severity, proc.stdout, proc.stderr)


@pytest.mark.parametrize(
    "name", ["zaroz.slack.title", "zaroz.slack.text", "zaroz.email.subject", "zaroz.email.text"]
)
def test_amtool_renders_the_notification_templates(name: str) -> None:
    """alerts/templates/*.tmpl parse and render in Alertmanager's own template engine (amtool's
    example data; tests/test_alerts_e2e.py renders them on real alerts)."""
    amtool = require("amtool")
    proc = subprocess.run(
        [amtool, "template", "render",
         f"--template.glob={ROOT / 'alerts' / 'templates' / '*.tmpl'}",
         f'--template.text={{{{ template "{name}" . }}}}'],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip(), f"{name} rendered nothing"
