"""The dashboards validate against Grafana's own dashboard types (npm @grafana/schema).

The JSON Schema is generated from `dist/types/raw/dashboard/x/types.gen.d.ts` (type `Dashboard`)
with ts-json-schema-generator, both pinned in dashboards/schema/package-lock.json, and cached in
node_modules keyed by both versions. `tsc` with `satisfies` is not used: it rejects valid JSON
for enum fields (a JSON string is not a literal type).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import dashboards
from dashboards import lib
from tests.components import missing, require

SCHEMA_DIR = Path(dashboards.__file__).resolve().parent / "schema"
NODE_MODULES = SCHEMA_DIR / "node_modules"
TYPES = NODE_MODULES / "@grafana/schema/dist/types/raw/dashboard/x/types.gen.d.ts"
GENERATOR = NODE_MODULES / "ts-json-schema-generator/bin/ts-json-schema-generator.js"
GENERATED = {**dashboards.generate(),
             **{f"native/{n}": d for n, d in dashboards.generate_native().items()}}


def _missing(msg: str) -> None:
    """A missing component fails under CI (.ci/run installs it) and skips elsewhere."""
    missing(msg + " (run: npm ci --prefix dashboards/schema)")


def _version(package: str) -> str:
    return json.loads((NODE_MODULES / package / "package.json").read_text())["version"]


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    node = require("node")
    for path in (TYPES, GENERATOR):
        if not path.is_file():
            _missing(f"{path.relative_to(SCHEMA_DIR)} is not installed")
    key = f"{_version('@grafana/schema')}-{_version('ts-json-schema-generator')}"
    cache = NODE_MODULES / ".cache" / f"grafana-dashboard-{key}.schema.json"
    if not cache.is_file():
        cache.parent.mkdir(exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        res = subprocess.run(
            [node, str(GENERATOR), "--path", str(TYPES), "--type", "Dashboard",
             "--no-type-check", "-o", str(tmp)],
            capture_output=True, text=True, timeout=300,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        tmp.replace(cache)  # atomic: a concurrent run never reads half a schema
    schema = json.loads(cache.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _errors(validator: jsonschema.protocols.Validator, dash: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}"
        for e in validator.iter_errors(dash)
    ]


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_dashboard_matches_grafana_schema(
    validator: jsonschema.protocols.Validator, name: str
) -> None:
    assert _errors(validator, GENERATED[name]) == []


def _first_panel(d: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in d["panels"] if p["type"] != "row")


def _drop_current_text(d: dict[str, Any]) -> None:
    del d["templating"]["list"][2]["current"]["text"]


def _null_time_from(d: dict[str, Any]) -> None:
    _first_panel(d)["timeFrom"] = None


def _bad_threshold_mode(d: dict[str, Any]) -> None:
    _first_panel(d)["fieldConfig"]["defaults"]["thresholds"]["mode"] = "absolut"


def _legacy_span(d: dict[str, Any]) -> None:
    _first_panel(d)["span"] = 6


def _row_without_panels(d: dict[str, Any]) -> None:
    del d["panels"][0]["panels"]


BREAKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "variable without current.text": _drop_current_text,
    "null timeFrom (grafanalib's unset value)": _null_time_from,
    "threshold mode outside the enum": _bad_threshold_mode,
    "Angular-era span": _legacy_span,
    "row without panels": _row_without_panels,
}


@pytest.mark.parametrize("fault", sorted(BREAKS))
def test_schema_rejects_a_broken_copy(
    validator: jsonschema.protocols.Validator, fault: str
) -> None:
    dash = copy.deepcopy(GENERATED[sorted(GENERATED)[0]])
    assert _errors(validator, dash) == []
    BREAKS[fault](dash)
    assert _errors(validator, dash), f"schema accepted a dashboard with {fault}"


def test_schema_rejects_grafanalib_output_without_normalising(
    validator: jsonschema.protocols.Validator,
) -> None:
    """Why `lib.normalise` exists: grafanalib's raw JSON is not Grafana's current model."""
    for build in dashboards.BUILDERS.values():
        raw = json.loads(json.dumps(build().to_json_data(), cls=lib.DashboardEncoder))
        assert _errors(validator, raw)
