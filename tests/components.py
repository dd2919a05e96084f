"""Real components the tests use: a missing one fails under CI (CI=true) and skips elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import NoReturn

import pytest


def missing(msg: str) -> NoReturn:
    """Fail under CI (where .ci/run must have installed it), skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        missing(f"{binary} is not installed (.ci/run installs it)")
    return path


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s: a component a test started must not outlive it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
