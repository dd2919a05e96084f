"""Generated docs stay current, and the code stays ruff clean."""

from __future__ import annotations

import shutil
import subprocess
import sys

from exporter import catalog
from tools import docsgen

ROOT = docsgen.ROOT


def test_metric_reference_in_docs_is_current():
    assert (ROOT / "docs" / "metrics.md").read_text() == docsgen.metrics_doc(), (
        "docs/metrics.md is stale: run python -m tools.docsgen"
    )


def test_configuration_reference_is_current():
    doc = docsgen.CONFIGURATION.read_text()
    assert doc == docsgen.with_configuration(doc), (
        "docs/configuration.md is stale: run python -m tools.docsgen"
    )
    for flag in ("--events-url", "--state-dir", "--explain-max", "--history"):
        assert f"| `{flag}` |" in doc


def test_every_catalog_metric_is_documented():
    doc = (ROOT / "docs" / "metrics.md").read_text()
    for m in catalog.METRICS:
        assert f"`{m.name}`" in doc


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = readme.split("```sh\n")
    test_cmd = next(b.split("\n")[0] for b in blocks[1:] if "pytest" in b.split("\n")[0])
    assert test_cmd in ci.splitlines()


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(ROOT / ".venv" / "bin" / "ruff")
    res = subprocess.run([ruff, "check", str(ROOT)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_help_lists_every_env_var():
    res = subprocess.run([sys.executable, "-m", "exporter.cli", "serve", "--help"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0
    for var in ("ZAROZ_EXPORTER_EVENTS_URL", "ZAROZ_EXPORTER_LISTEN", "ZAROZ_EXPORTER_WAIT"):
        assert var in res.stdout


def test_a_metric_declared_twice_fails():
    import pytest

    from exporter import catalog

    with pytest.raises(ValueError, match="declared twice"):
        catalog._by_name((catalog.METRICS[0], catalog.METRICS[1], catalog.METRICS[0]))
    assert len(catalog.BY_NAME) == len(catalog.METRICS)
