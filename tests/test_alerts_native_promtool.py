"""`promtool test rules` on the native-histogram SLO alerts (alerts/tests/native/), at thresholds
that are no classic bucket boundary (readiness 45 s, allocation ack 1.5 s), with promtool 2.53
from Debian trixie and 3.5 LTS (.ci/components): bookworm's 2.42 cannot write native histogram
series, so 2.53 stands for the oldest Prometheus 2 these rules are tested on.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from alerts import native_cases, render
from alerts.config import Config
from tests.components import PROMTOOL_3, require_cached, require_promtool_native

FILES = sorted(p.name for p in render.NATIVE_TESTS_DIR.glob("*.yaml"))
PROMTOOLS = ["2.53", "3.5"]


def _promtool(version: str) -> str:
    return require_cached(PROMTOOL_3) if version == "3.5" else require_promtool_native()


def _test_rules(cwd: Path, name: str, version: str = "2.53") -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(version), "test", "rules", name], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_the_thresholds_are_no_classic_bucket_boundary() -> None:
    assert FILES == ["slo-shipped.yaml", "slo.yaml"]
    with pytest.raises(ValueError, match="not a bucket boundary"):
        Config(slos=native_cases.TEST_CONFIG.slos[:1])
    with pytest.raises(ValueError, match="not a bucket boundary"):
        Config(slos=native_cases.TEST_CONFIG.slos[1:])


@pytest.mark.parametrize("version", PROMTOOLS)
@pytest.mark.parametrize("name", FILES)
def test_promtool_test_rules_native(name: str, version: str) -> None:
    """Fast burn pages then tickets, slow burn only tickets, resolves when the burn stops, and a
    healthy neighbour never fires: over native histogram series."""
    proc = _test_rules(render.NATIVE_TESTS_DIR, name, version)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "SUCCESS" in proc.stdout


def test_the_cases_fail_at_the_classic_boundary(tmp_path: Path) -> None:
    """The same cases against rules at readiness 60 s (the classic bound above 45 s) fail: the
    slow readinesses (49.5 s) are then good, so the readiness alerts stay silent. Evidence that
    the cases test the 45 s threshold and that promtool's failures reach this test."""
    shutil.copytree(render.NATIVE_TESTS_DIR, tmp_path / "native")
    rules = tmp_path / "native" / "rules" / "recording.yaml"
    text = rules.read_text()
    assert text.count("histogram_fraction(0, 45,") == 7  # one per SLO window
    rules.write_text(text.replace("histogram_fraction(0, 45,", "histogram_fraction(0, 60,"))
    proc = _test_rules(tmp_path / "native", "slo.yaml")
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    failed = {line.strip() for line in out.splitlines() if line.strip().startswith("name: ")}
    assert failed, out
    assert all("ZarozReadinessBudgetBurn" in f and "45 s" in f for f in failed), failed
