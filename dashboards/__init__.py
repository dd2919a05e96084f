"""Grafana dashboards for zaroz, generated from the metric catalog with grafanalib.

`python -m dashboards` writes `dashboards/json/<uid>.json`, and the dashboards that read latency
histograms again for native histograms in `dashboards/json/native/<uid>-native.json` (the
switch `alerts.config.Config.native_histograms` picks the rules; these match them); tests fail
when those files differ from what the code generates, so the checked-in JSON is always what the
code says.
"""

from __future__ import annotations

import copy as copy_module
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafanalib import core as g

from alerts.config import DEFAULT_CONFIG, NATIVE_CONFIG, Config

from . import exporter_health, generations, lib, units

JSON_DIR = Path(__file__).resolve().parent / "json"
NATIVE_DIR = JSON_DIR / "native"

# uid -> builder. The uid is the file name and Grafana's URL: never change one.
BUILDERS: dict[str, Callable[[], g.Dashboard]] = {
    units.UID: units.build,
    generations.UID: generations.build,
    exporter_health.UID: exporter_health.build,
}


def _build(config: Config) -> dict[str, dict[str, Any]]:
    with lib.configured(config):
        return {uid: lib.render(build()) for uid, build in BUILDERS.items()}


def generate(config: Config = DEFAULT_CONFIG) -> dict[str, dict[str, Any]]:
    """Every dashboard as Grafana JSON for `config` (its cluster label, exporter selector and
    histogram kind), keyed by file name. Native histograms: each dashboard that reads
    histograms is its native variant (`generate_native`), the others are the classic ones."""
    classic = {f"{uid}.json": data
               for uid, data in _build(_with_native(config, False)).items()}
    if not config.native_histograms:
        return classic
    native = generate_native(config)
    out = {}
    for name, data in classic.items():
        variant = native.get(f"{data['uid']}{lib.NATIVE_SUFFIX}.json")
        out.update({name: data} if variant is None else {f"{variant['uid']}.json": variant})
    return out


def generate_native(config: Config = NATIVE_CONFIG) -> dict[str, dict[str, Any]]:
    """The native-histogram variants of the dashboards that read histograms (the others are the
    same either way: recorded quantiles keep their names), keyed by file name."""
    classic = _build(_with_native(config, False))
    out = {}
    for uid, data in _build(_with_native(config, True)).items():
        plain = {**data, "uid": uid, "title": classic[uid]["title"]}
        if plain != classic[uid]:
            out[f"{uid}{lib.NATIVE_SUFFIX}.json"] = data
    return out


def _with_native(config: Config, native: bool) -> Config:
    """`config` with the histogram switch set, copied without the dataclass checks (a symbolic
    Config's jsonnet values cannot pass them; a real one passed them already)."""
    if config.native_histograms == native:
        return config
    copy = copy_module.copy(config)
    object.__setattr__(copy, "native_histograms", native)
    return copy
