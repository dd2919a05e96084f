"""Readable explanations of contract violations with python-jsonschema, aligned with jsonschema-rs.

Imported only when an explanation is asked for: python-jsonschema takes longer to import than a
whole replay of a small file (see `exporter.contract` for how the two validators are aligned).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator, FormatChecker, ValidationError
from jsonschema.exceptions import best_match

from exporter.contract import _schema
from exporter.timestamps import parse_rfc3339_ns


def _is_date_time(instance: object) -> bool:
    if not isinstance(instance, str):
        return True  # formats only constrain strings
    parse_rfc3339_ns(instance)  # raises ValueError
    return True


def _ecma_dollar(pattern: str) -> str:
    """Rewrite unescaped ``$`` outside character classes to ``\\Z`` (end of text, as in Rust)."""
    out: list[str] = []
    escaped = in_class = False
    for ch in pattern:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "$":
            out.append(r"\Z")
            continue
        out.append(ch)
    return "".join(out)


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(_ecma_dollar(pattern))


def _pattern(
    validator: Any, patrn: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _compiled(patrn).search(instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


_format_checker = FormatChecker()
_format_checker.checks("date-time", raises=ValueError)(_is_date_time)

_ExplainValidator = jsonschema.validators.extend(
    Draft202012Validator, validators={"pattern": _pattern}
)


@functools.cache
def _explainer(name: str) -> Any:
    return _ExplainValidator(_schema(name), format_checker=_format_checker)


def _json_path(error: ValidationError) -> str:
    path = "$"
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def explain(
    schema_name: str, instance: Any, *, max_errors: int = 10, max_len: int = 200
) -> list[str]:
    """Readable reasons why ``instance`` fails schema ``schema_name``, ``[]`` when it is valid.

    Each line is ``<JSON path>: <message>``, at most ``max_errors`` lines of ``max_len`` chars (an
    event's ``data`` can be large). For logs only; use :func:`validator` to decide validity.
    """
    messages: list[str] = []
    seen: set[str] = set()
    for error in sorted(_explainer(schema_name).iter_errors(instance), key=_json_path):
        # A failed oneOf ("... is not valid under any of the given schemas") says little; its
        # most relevant sub-error (e.g. "'x' is too long") says why.
        leaf = best_match([error]) if error.context else error
        line = _shorten(f"{_json_path(leaf)}: {leaf.message}", max_len)
        if line not in seen:
            seen.add(line)
            messages.append(line)
            if len(messages) >= max_errors:
                break
    return messages
