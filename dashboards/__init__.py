"""Grafana dashboards for zaroz, generated from the metric catalog with grafanalib.

`python -m dashboards` writes `dashboards/json/<uid>.json`, and the dashboards that read latency
histograms again for native histograms in `dashboards/json/native/<uid>-native.json` (the
switch `alerts.config.Config.native_histograms` picks the rules; these match them); tests fail
when those files differ from what the code generates, so the checked-in JSON is always what the
code says.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafanalib import core as g

from . import exporter_health, generations, lib, units

JSON_DIR = Path(__file__).resolve().parent / "json"
NATIVE_DIR = JSON_DIR / "native"

# uid -> builder. The uid is the file name and Grafana's URL: never change one.
BUILDERS: dict[str, Callable[[], g.Dashboard]] = {
    units.UID: units.build,
    generations.UID: generations.build,
    exporter_health.UID: exporter_health.build,
}


def generate() -> dict[str, dict[str, Any]]:
    """Every dashboard as Grafana JSON, keyed by file name."""
    return {f"{uid}.json": lib.render(build()) for uid, build in BUILDERS.items()}


def generate_native() -> dict[str, dict[str, Any]]:
    """The native-histogram variants of the dashboards that read histograms (the others are the
    same either way: recorded quantiles keep their names), keyed by file name."""
    classic = generate()
    out = {}
    with lib.native():
        for uid, build in BUILDERS.items():
            data = lib.render(build())
            plain = {**data, "uid": uid, "title": classic[f"{uid}.json"]["title"]}
            if plain != classic[f"{uid}.json"]:
                out[f"{uid}{lib.NATIVE_SUFFIX}.json"] = data
    return out
