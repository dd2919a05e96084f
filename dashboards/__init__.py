"""Grafana dashboards for zaroz, generated from the metric catalog with grafanalib.

`python -m dashboards` writes `dashboards/json/<uid>.json`; tests fail when those files differ
from what the code generates, so the checked-in JSON is always what the code says.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafanalib import core as g

from . import exporter_health, generations, lib, units

JSON_DIR = Path(__file__).resolve().parent / "json"

# uid -> builder. The uid is the file name and Grafana's URL: never change one.
BUILDERS: dict[str, Callable[[], g.Dashboard]] = {
    units.UID: units.build,
    generations.UID: generations.build,
    exporter_health.UID: exporter_health.build,
}


def generate() -> dict[str, dict[str, Any]]:
    """Every dashboard as Grafana JSON, keyed by file name."""
    return {f"{uid}.json": lib.render(build()) for uid, build in BUILDERS.items()}
