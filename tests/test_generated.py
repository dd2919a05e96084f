"""Every generated artefact is current: `python -m tools.gen --check` runs the four generators in
order and reports anything they would change."""

from __future__ import annotations

import subprocess
import sys

from tools.gen import ROOT


def test_every_generated_file_is_current():
    run = subprocess.run([sys.executable, "-m", "tools.gen", "--check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_check_reports_a_stale_file_and_puts_it_back():
    target = ROOT / "docs" / "metrics.md"
    original = target.read_bytes()
    try:
        target.write_bytes(original + b"\nstale line\n")
        run = subprocess.run([sys.executable, "-m", "tools.gen", "--check"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 1
        assert "stale: docs/metrics.md" in run.stdout
        assert target.read_bytes() == original + b"\nstale line\n"  # left as it was
    finally:
        target.write_bytes(original)
