"""A real Prometheus' HTTP API, read synchronously (urllib), for the tests that start one."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status == 200


class Prom:
    def __init__(self, base: str) -> None:
        self.base = base

    def query(self, expr: str) -> dict[str, Any]:
        q = urllib.parse.urlencode({"query": expr})
        try:
            return get(f"{self.base}/api/v1/query?{q}")
        except urllib.error.HTTPError as e:
            return json.load(e)

    def result(self, expr: str) -> list[dict[str, Any]]:
        body = self.query(expr)
        assert body["status"] == "success", f"{expr}: {body}"
        return body["data"]["result"]


def wait(what: str, cond: Callable[[], Any], timeout: float,
         why: Callable[[], Any] | None = None) -> None:
    """Until `cond()` holds (errors of a server not up yet count as not yet); then fail with
    `what`, the last error, and `why()` when given."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except (OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what} (last error: {last})"
                + (f": {why()}" if why else ""))
