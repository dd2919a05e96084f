"""Metric names referenced by a PromQL expression, without a PromQL parser.

Enough of PromQL for the expressions the dashboards write: it drops string literals, label
matchers, range selectors and `by (...)`-style label lists, then takes every identifier that is
not a function call, a keyword or part of a number. The tests use it to hold every dashboard
expression to the catalog; `promtool check rules` separately proves the expressions parse.
"""

from __future__ import annotations

import re

# Words that look like identifiers but are operators or literals.
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
     "group_left", "group_right", "inf", "nan", "atan2"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,")


def metric_names(expr: str) -> set[str]:
    """Every metric (or recorded series) name `expr` selects."""
    s = _STRING.sub('""', expr)
    s = _MATCHERS.sub("", s)
    s = _RANGE.sub("", s)
    s = _LABEL_LIST.sub("", s)
    names = set()
    for m in _IDENT.finditer(s):
        word = m.group()
        if word.lower() in _KEYWORDS or s[m.end():].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def variable_metric(query: str) -> str | None:
    """The metric of a Grafana `label_values(metric, label)` variable query, if it is one."""
    m = _LABEL_VALUES.match(query)
    return m.group(1) if m else None
