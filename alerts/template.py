"""Configuration values as jsonnet expressions, so one rule builder writes both outputs.

The rule and dashboard builders format every configurable value through `num`,
`human_duration`, `percent`, a `:.Ng` spec or a plain f-string. Given a `Config` of real values
they write rule text; given the `Sym` values of `symbolic_config`, the same code writes text in
which each value is a token standing for a jsonnet expression of `_config` (`c.clusterLabel`,
`z.num(c.generationLagSeconds)`, ...). `jsonnet` then turns such a structure into jsonnet source:
the monitoring mixin's templates (tools/mixin.py). Arithmetic on a `Sym` (an error budget,
a burn-rate threshold) becomes the same arithmetic in jsonnet, in the same order, so both sides
compute the same doubles; mixin/lib/format.libsonnet formats them as Python does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, fields

_OPEN, _CLOSE = "\ue000", "\ue001"
_TOKEN = re.compile(f"{_OPEN}(\\d+){_CLOSE}")


@dataclass(frozen=True)
class Expr:
    """A jsonnet expression; `loop` is (variable, array) when it reads a comprehension's
    variable (a burn-rate pair), so the rule holding it is repeated over that array."""

    code: str
    loop: tuple[str, str] | None = None


_EXPRS: list[Expr] = []
_INDEX: dict[Expr, int] = {}


def _token(e: Expr) -> str:
    if e not in _INDEX:
        _INDEX[e] = len(_EXPRS)
        _EXPRS.append(e)
    return f"{_OPEN}{_INDEX[e]}{_CLOSE}"


def _lit(x: object) -> str:
    if isinstance(x, Sym):
        return x.code
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise TypeError(f"no jsonnet arithmetic with {x!r}")
    return repr(x)


class Sym:
    """A configuration value known only in jsonnet: formats as a token, computes as code."""

    __slots__ = ("code", "loop")

    def __init__(self, code: str, loop: tuple[str, str] | None = None) -> None:
        self.code = code
        self.loop = loop

    def __repr__(self) -> str:
        return f"Sym({self.code!r})"

    # Only jsonnet knows the value: a builder that tests or compares one must say so (an
    # `isinstance(x, Sym)` branch), instead of silently taking one side.
    def __bool__(self) -> bool:
        raise TypeError(f"the truth of {self.code} is known in jsonnet only")

    def __eq__(self, other: object) -> bool:
        raise TypeError(f"{self.code} compared with {other!r}: known in jsonnet only")

    __hash__ = object.__hash__

    def __str__(self) -> str:
        return _token(Expr(self.code, self.loop))

    def __format__(self, spec: str) -> str:
        if not spec:
            return str(self)
        m = re.fullmatch(r"\.(\d+)g", spec)
        if m is None:
            raise ValueError(f"no jsonnet form of format spec {spec!r}")
        return call("g", self, int(m.group(1)))

    def _op(self, other: object, op: str, flip: bool = False) -> Sym:
        loop = self.loop or (other.loop if isinstance(other, Sym) else None)
        a, b = (_lit(other), self.code) if flip else (self.code, _lit(other))
        return Sym(f"({a} {op} {b})", loop)

    def __mul__(self, o: object) -> Sym:
        return self._op(o, "*")

    def __rmul__(self, o: object) -> Sym:
        return self._op(o, "*", True)

    def __add__(self, o: object) -> Sym:
        return self._op(o, "+")

    def __radd__(self, o: object) -> Sym:
        return self._op(o, "+", True)

    def __sub__(self, o: object) -> Sym:
        return self._op(o, "-")

    def __rsub__(self, o: object) -> Sym:
        return self._op(o, "-", True)


def call(fn: str, value: Sym, *args: object) -> str:
    """A token for `z.<fn>(value, args...)`, a function of mixin/lib/format.libsonnet."""
    extra = "".join(f", {json.dumps(a)}" for a in args)
    return _token(Expr(f"z.{fn}({value.code}{extra})", value.loop))


def has_tokens(text: str) -> bool:
    return _OPEN in text


@dataclass(frozen=True)
class CondKey:
    """An object key present only when `cond` (jsonnet) holds: `[if cond then key]: value`."""

    key: str
    cond: str


# --- Python config -> jsonnet _config --------------------------------------------------------

# Python field -> _config key (kubernetes-mixin spelling); others are the field in camelCase.
RENAMED = {"job_selector": "exporterSelector"}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def config_key(field_name: str) -> str:
    return RENAMED.get(field_name, camel(field_name))


def to_config(config: object) -> dict[str, object]:
    """A `Config` as the mixin's `_config` (JSON-able): what config.libsonnet holds for the
    default one, and the override that makes the mixin render another `Config`'s rules."""
    out: dict[str, object] = {}
    for f in fields(config):  # type: ignore[arg-type]
        value = getattr(config, f.name)
        if f.name == "slos":
            value = {camel(s.key): {"objective": s.objective, "threshold": s.threshold}
                     for s in value}
        elif f.name == "burn_rates":
            value = [{"long": b.long, "short": b.short, "factor": b.factor, "for": b.for_,
                      "severity": b.severity} for b in value]
        out[config_key(f.name)] = value
    return out


def symbolic_config(config_cls: type, slo_cls: type, burn_cls: type, native: bool,
                    var: str = "c") -> object:
    """A `Config` whose every value but `native_histograms` is a `Sym` reading `_config`
    (bound to `var`); its one burn-rate pair reads the variable of a comprehension over
    `_config.burnRates`. Built without the dataclasses' checks (jsonnet asserts its own)."""

    def bare(cls: type, **values: object) -> object:
        obj = object.__new__(cls)
        for k, v in values.items():
            object.__setattr__(obj, k, v)
        return obj

    values: dict[str, object] = {}
    for f in fields(config_cls):
        key = config_key(f.name)
        if f.name == "native_histograms":
            values[f.name] = native
        elif f.name == "slos":
            values[f.name] = tuple(
                bare(slo_cls, key=k, objective=Sym(f"{var}.slos.{camel(k)}.objective"),
                     threshold=Sym(f"{var}.slos.{camel(k)}.threshold"))
                for k in slo_keys(config_cls))
        elif f.name == "burn_rates":
            loop = ("b", f"{var}.burnRates")
            values[f.name] = (bare(burn_cls, long=Sym("b.long", loop), short=Sym("b.short", loop),
                                   factor=Sym("b.factor", loop), for_=Sym("b['for']", loop),
                                   severity=Sym("b.severity", loop)),)
        else:
            values[f.name] = Sym(f"{var}.{key}")
    return bare(config_cls, **values)


def slo_keys(config_cls: type) -> list[str]:
    return [s.key for s in config_cls().slos]


# --- structures -> jsonnet source ------------------------------------------------------------


def _string(text: str) -> str:
    parts: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        if m.start() > pos:
            parts.append(json.dumps(text[pos:m.start()], ensure_ascii=False))
        parts.append(_EXPRS[int(m.group(1))].code)
        pos = m.end()
    if pos < len(text) or not parts:
        parts.append(json.dumps(text[pos:], ensure_ascii=False))
    if not parts[0].startswith('"'):
        parts.insert(0, '""')  # `+` concatenates strings only when one side is one
    return " + ".join(parts)


def _loops(value: object) -> Iterator[tuple[str, str]]:
    """The comprehensions `value` reads, but not those of a list inside it (which repeats its
    own items)."""
    if isinstance(value, Sym):
        value = str(value)
    if isinstance(value, str):
        for m in _TOKEN.finditer(value):
            loop = _EXPRS[int(m.group(1))].loop
            if loop is not None:
                yield loop
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _loops(k.key if isinstance(k, CondKey) else k)
            if not isinstance(v, list | tuple):
                yield from _loops(v)


def _key(key: object) -> str:
    if isinstance(key, CondKey):
        return f"[if {key.cond} then {json.dumps(key.key)}]"
    assert isinstance(key, str)
    return f"[{_string(key)}]" if has_tokens(key) else json.dumps(key, ensure_ascii=False)


def jsonnet(value: object, indent: str = "") -> str:
    """jsonnet source for a JSON-like structure whose strings may hold tokens. A list item that
    reads a comprehension's variable becomes that comprehension (one item per array element,
    in place: each symbolic item must stand for one item per element)."""
    inner = indent + "  "
    if isinstance(value, Sym):
        value = str(value)
    if isinstance(value, str):
        return _string(value)
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, dict):
        if not value:
            return "{}"
        body = "".join(f"{inner}{_key(k)}: {jsonnet(v, inner)},\n" for k, v in value.items())
        return "{\n" + body + indent + "}"
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        segments: list[str] = []
        plain: list[str] = []
        for item in value:
            loops = set(_loops(item))
            if len(loops) > 1:
                raise ValueError(f"an item reads two comprehensions: {loops}")
            if not loops:
                plain.append(f"{inner}{jsonnet(item, inner)},\n")
                continue
            if plain:
                segments.append("[\n" + "".join(plain) + indent + "]")
                plain = []
            var, array = loops.pop()
            segments.append(f"[\n{inner}{jsonnet(item, inner)}\n{inner}for {var} in {array}\n"
                            f"{indent}]")
        if plain:
            segments.append("[\n" + "".join(plain) + indent + "]")
        return " + ".join(segments)
    raise TypeError(f"no jsonnet form of {value!r}")
