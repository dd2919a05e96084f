"""Label and field selectors as kube-apiserver parses them, and RFC 7386 JSON merge patch.

Kept apart from the emulator so the grammar (and its 400 errors) can be tested on its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = rf"(?:[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}"
_VALUE = rf"(?:{_NAME})?"
_NOT_EXISTS = re.compile(rf"\s*!\s*({_KEY})\s*")
_EQUALITY = re.compile(rf"\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*")
_SET = re.compile(rf"\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*")
_NUMERIC = re.compile(rf"\s*({_KEY})\s*(>|<)\s*(-?[0-9]+)\s*")
_EXISTS = re.compile(rf"\s*({_KEY})\s*")
_VALUE_RE = re.compile(_VALUE)

Labels = Mapping[str, str]
Matcher = Callable[[Labels], bool]


class SelectorError(ValueError):
    """A selector the API server would refuse with 400 BadRequest."""


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses (set values contain commas)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _requirement(text: str) -> Matcher:
    if m := _NOT_EXISTS.fullmatch(text):
        key = m[1]
        return lambda labels: key not in labels
    if m := _EQUALITY.fullmatch(text):
        key, op, value = m[1], m[2], m[3]
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _SET.fullmatch(text):
        key, op = m[1], m[2]
        values = {v.strip() for v in m[3].split(",")}
        if not all(_VALUE_RE.fullmatch(v) for v in values):
            raise SelectorError(f"unable to parse requirement: invalid value in {text!r}")
        if op == "in":
            return lambda labels: key in labels and labels[key] in values
        return lambda labels: labels.get(key) not in values
    if m := _NUMERIC.fullmatch(text):
        key, op, bound = m[1], m[2], int(m[3])

        def numeric(labels: Labels) -> bool:
            raw = labels.get(key)
            if raw is None or not re.fullmatch(r"-?[0-9]+", raw):
                return False
            return int(raw) > bound if op == ">" else int(raw) < bound

        return numeric
    if m := _EXISTS.fullmatch(text):
        key = m[1]
        return lambda labels: key in labels
    raise SelectorError(f"unable to parse requirement: {text!r}")


def parse_label_selector(text: str | None) -> Matcher:
    """`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, `k>1`, `k<1`, ANDed."""
    if text is None or not text.strip():
        return lambda labels: True
    matchers = [_requirement(part) for part in _split(text)]
    return lambda labels: all(m(labels) for m in matchers)


_FIELDS = {"metadata.name": ("name",), "metadata.namespace": ("namespace",)}
_FIELD_REQ = re.compile(r"\s*([A-Za-z.]+)\s*(==|=|!=)\s*([^,]*?)\s*")
ObjMatcher = Callable[[Mapping[str, Any]], bool]


def parse_field_selector(text: str | None) -> ObjMatcher:
    """Field selectors a CRD supports: metadata.name and metadata.namespace (=, ==, !=)."""
    if text is None or not text.strip():
        return lambda obj: True
    reqs: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        m = _FIELD_REQ.fullmatch(part)
        if m is None:
            raise SelectorError(f"invalid selector: {part!r}; can't understand")
        if m[1] not in _FIELDS:
            raise SelectorError(f'field label not supported: "{m[1]}"')
        reqs.append((_FIELDS[m[1]][0], m[2] != "!=", m[3]))
    return lambda obj: all(
        (obj["metadata"].get(field) == value) is equal for field, equal, value in reqs
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
