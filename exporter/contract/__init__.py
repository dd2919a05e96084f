"""The units contract v1 JSON Schemas: fast validity checks and readable explanations.

Two validators, one verdict: jsonschema-rs decides validity (it is fast enough for the replay hot
path); python-jsonschema only explains *why* an instance is invalid, for logs. The python side is
configured to agree with jsonschema-rs where the two differ out of the box (guarded by
``tests/test_contract.py``):

- ``format: date-time``: rfc3339-validator rejects leap seconds (``23:59:60``) and year 0000 and
  accepts a trailing newline; jsonschema-rs accepts ``:60`` when the UTC time is 23:59 (after the
  offset) and rejects the newline. The python side checks with
  :func:`exporter.timestamps.parse_rfc3339_ns`, which implements jsonschema-rs's rule, so
  the schema and the parser that later reads ``occurred_at`` cannot disagree either.
- ``pattern``: Python's ``$`` also matches before a final ``\\n`` (so ``"evt_…\\n"`` matched
  ``^evt_…$``); jsonschema-rs's ``$`` is end of text. The python side rewrites ``$`` to ``\\Z``.

No schema uses another ``format``; both sides ignore unknown formats.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Callable, Mapping
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import jsonschema_rs
import orjson

__all__ = [
    "SCHEMAS",
    "SCHEMA_DIR",
    "SCHEMA_NAMES",
    "explain",
    "is_valid",
    "is_valid_event",
    "is_valid_unit_signal_spec",
    "is_valid_unit_signal_status",
    "validator",
]

#: Schema names: the file names in contract/units/v1 without ``.schema.json``.
SCHEMA_NAMES: Final = (
    "accepting-request",
    "allocation",
    "contract",
    "error",
    "event",
    "signal-response",
    "state",
    "unit",
    "unit-signal-spec",
    "unit-signal-status",
    "user-data",
)
_SUFFIX = ".schema.json"


def _schema_dir() -> Traversable:
    """Wheels ship the schemas inside the package; editable installs use the repo's ``schemas/``."""
    packaged = importlib.resources.files("exporter") / "schemas"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "schemas"


def _load(directory: Traversable) -> Mapping[str, Mapping[str, Any]]:
    """Load every contract schema; a missing file is a packaging bug, so fail loudly at import."""
    out = {}
    for name in SCHEMA_NAMES:
        path = directory / f"{name}{_SUFFIX}"
        if not path.is_file():
            raise FileNotFoundError(f"contract schema {name!r} missing from {directory}")
        out[name] = orjson.loads(path.read_bytes())
    return MappingProxyType(out)


SCHEMA_DIR: Final = _schema_dir()
#: Parsed schemas by name (treat as read-only).
SCHEMAS: Final = _load(SCHEMA_DIR)


def _schema(name: str) -> Mapping[str, Any]:
    try:
        return SCHEMAS[name]
    except KeyError:
        known = ", ".join(SCHEMA_NAMES)
        raise KeyError(f"unknown contract schema {name!r}; known: {known}") from None


# ---------------------------------------------------------------------------------------------
# Hot path: jsonschema-rs


@functools.cache
def validator(name: str) -> jsonschema_rs.Validator:
    """The jsonschema-rs validator of a schema, format assertion on (the contract requires it)."""
    return jsonschema_rs.validator_for(dict(_schema(name)), validate_formats=True, offline=True)


def is_valid(name: str, instance: Any) -> bool:
    """Whether ``instance`` is valid against schema ``name`` (prefer the bound callables below)."""
    return validator(name).is_valid(instance)


#: Plain bound methods, so the replay loop pays for one C call and nothing else.
is_valid_event: Final[Callable[[Any], bool]] = validator("event").is_valid
is_valid_unit_signal_spec: Final[Callable[[Any], bool]] = validator("unit-signal-spec").is_valid
is_valid_unit_signal_status: Final[Callable[[Any], bool]] = validator("unit-signal-status").is_valid


def explain(
    schema_name: str, instance: Any, *, max_errors: int = 10, max_len: int = 200
) -> list[str]:
    """Readable reasons why ``instance`` fails ``schema_name`` (``[]`` when valid); for logs."""
    from exporter.contract.detail import explain as _explain

    return _explain(schema_name, instance, max_errors=max_errors, max_len=max_len)
