"""The type checker, as part of the test command: mypy, strict on `exporter/` and `zaroz_sim/`
(configured in pyproject.toml, `[tool.mypy]`), must report no error.

mypy keeps its cache in `.mypy_cache/` at the repository root, so a run after a small change
re-checks only what the change touches.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True,
        timeout=600, check=False,
    )


def test_mypy_is_configured_strict_on_the_product() -> None:
    """What the next test checks: both packages, strictly, with no global escape hatch."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert conf["files"] == ["exporter", "zaroz_sim"]
    assert conf["strict"] is True
    assert "ignore_missing_imports" not in conf  # only per module, where a library has no types
    assert "ignore_errors" not in conf


def test_mypy_reports_no_error() -> None:
    r = _mypy()
    assert r.returncode == 0, f"mypy found errors:\n{r.stdout}{r.stderr}"
    assert "Success: no issues found" in r.stdout, r.stdout + r.stderr


def test_a_type_error_is_found(tmp_path: Path) -> None:
    """The check can fail: the same configuration finds a wrong call to the typed registry (a
    counter's series has no `set`), in a module of its own outside the tree."""
    bad = tmp_path / "bad_types.py"
    bad.write_text(
        "from exporter.sinks.metrics.family import Registry\n\n\n"
        "def wrong(r: Registry) -> None:\n"
        '    r.counter("zaroz_events_total").labels("w", "t").set(1)\n'
    )
    r = _mypy(str(bad))
    assert r.returncode == 1, r.stdout + r.stderr
    assert 'bad_types.py:5: error: "CounterSeries" has no attribute "set"' in r.stdout, r.stdout


def test_the_type_ignores_are_counted_in_the_readme() -> None:
    """The few `type: ignore`s left each name their error code and say why (on the line or in
    the comment just above), and docs/architecture.md says how many there are."""
    found = []
    for path in sorted([*ROOT.glob("exporter/**/*.py"), *ROOT.glob("zaroz_sim/**/*.py")]):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if "type: ignore" not in line:
                continue
            where = f"{path.relative_to(ROOT)}:{i + 1}"
            found.append(where)
            assert re.search(r"# type: ignore\[[a-z-]+(, [a-z-]+)*\]", line), where
            after = line.split("]", 1)[1].strip() if "]" in line else ""
            above = lines[i - 1].strip()
            assert after.startswith("#") or above.startswith("#"), f"{where}: no reason given"
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert f"{len(found)} `type: ignore`" in doc, found
