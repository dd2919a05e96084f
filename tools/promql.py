"""Just enough PromQL lexing to list the metrics an expression reads: the one PromQL helper of
the alert rules' and the dashboards' tests.

Tests use it to check every rule and dashboard query against the catalog and to query each
selector on a live Prometheus; a full parser would be a dependency for a job a tokenizer does
(`promtool check rules` separately proves the expressions parse).
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", re.IGNORECASE
)
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?(\s*\()?")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,")
_KEYWORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
    "group_right", "inf", "nan", "atan2",
}


def _mask_strings(expr: str) -> tuple[str, list[str]]:
    strings: list[str] = []

    def keep(m: re.Match[str]) -> str:
        strings.append(m.group(0))
        return f'"\x00{len(strings) - 1}\x00"'

    return _STRING.sub(keep, expr), strings


def _unmask(text: str, strings: list[str]) -> str:
    return re.sub(r'"\x00(\d+)\x00"', lambda m: strings[int(m.group(1))], text)


def metric_selectors(expr: str) -> list[str]:
    """Vector selectors in `expr` (`name{matchers}` or `name`), in order, without duplicates.

    Function names (followed by `(`), keywords, grouping label lists and durations are skipped.
    Selectors without a metric name (`{__name__=...}`) are not reported.
    """
    text, strings = _mask_strings(expr)
    text = _GROUPING.sub(" ", text)
    text = _RANGE.sub(" ", text)
    out: list[str] = []
    for m in _IDENT.finditer(text):
        name, matchers, call = m.group(1), m.group(2), m.group(3)
        if call and not matchers:
            continue  # a function call
        if name.lower() in _KEYWORDS:
            continue
        sel = name + (_unmask(matchers, strings) if matchers else "")
        if sel not in out:
            out.append(sel)
    return out


def metric_names(expr: str) -> set[str]:
    """Metric names `expr` reads."""
    return {s.split("{", 1)[0] for s in metric_selectors(expr)}


def variable_metric(query: str) -> str | None:
    """The metric of a Grafana `label_values(metric, label)` variable query, if it is one."""
    m = _LABEL_VALUES.match(query)
    return m.group(1) if m else None
