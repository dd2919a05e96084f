"""Real components the tests use: a missing one fails under CI (CI=true) and skips elsewhere."""

from __future__ import annotations

import os
import shutil

import pytest


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        msg = f"{binary} is not installed (.ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path
