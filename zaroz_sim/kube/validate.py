"""A custom resource checked against its CRD's structural schema, as kube-apiserver does it.

The structural OpenAPI v3 schema is converted once into JSON Schema 2020-12 (`nullable` becomes
a `null` type, `x-kubernetes-preserve-unknown-fields` an open object) and checked by
jsonschema-rs, the validator the exporter already uses on its hot paths: no hand-written type,
pattern, enum or format checks. What is kube's own is around it: pruning of unknown fields,
ratcheting (an update is not refused for a bad value it did not change, as with kube 1.30+'s
CRDValidationRatcheting), and the `field.Error` texts kubectl prints from `details.causes`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema_rs
import orjson

from zaroz_sim.kube.store import KubeError, Obj

_COPIED = ("enum", "pattern", "format", "minLength", "maxLength", "minimum", "maximum",
           "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
           "uniqueItems", "minProperties", "maxProperties", "required")  # fmt: skip
# kube-openapi's strfmt date-time: RFC 3339, also with a space, no seconds or no offset.
_DATE_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?"
)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_TYPE_NAMES = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object",
               list: "array", type(None): "null"}  # fmt: skip
_NO_VALUE = object()
_WORDS = {"FieldValueRequired": "Required value", "FieldValueInvalid": "Invalid value",
          "FieldValueTypeInvalid": "Invalid value", "FieldValueNotSupported": "Unsupported value",
          "FieldValueTooLong": "Too long", "FieldValueTooMany": "Too many",
          "FieldValueForbidden": "Forbidden"}  # fmt: skip


def to_json_schema(node: Mapping[str, Any]) -> Obj:
    """One structural OpenAPI v3 node as JSON Schema 2020-12 (the checks, not the docs)."""
    out: Obj = {}
    typ = node.get("type")
    if typ is not None:
        out["type"] = [typ, "null"] if node.get("nullable") else typ
    for key in _COPIED:
        if key in node:
            out[key] = node[key]
    if "properties" in node:
        out["properties"] = {k: to_json_schema(v) for k, v in node["properties"].items()}
    if isinstance(node.get("additionalProperties"), Mapping):
        out["additionalProperties"] = to_json_schema(node["additionalProperties"])
    if "items" in node:
        out["items"] = to_json_schema(node["items"])
    return out


def _date_time(value: str) -> bool:
    return _DATE_TIME.fullmatch(value) is not None


@dataclass(frozen=True)
class FieldError:
    """apimachinery's field.Error: `type` is the cause reason (FieldValueInvalid, ...)."""

    type: str
    field: str
    detail: str = ""
    value: Any = _NO_VALUE


    def body(self) -> str:
        """ErrorBody(): the type's words, the bad value (not for some types), the detail."""
        text = _WORDS[self.type]
        if self.value is not _NO_VALUE and self.type not in (
            "FieldValueRequired", "FieldValueTooLong", "FieldValueForbidden"
        ):
            text += f": {_go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def cause(self) -> Obj:
        return {"reason": self.type, "message": self.body(), "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


class GoLiteral(str):
    """A bad value printed as it is (Go's %#v of a non-string, e.g. `0x0`)."""


def _go_value(value: Any) -> str:
    """How field.Error prints a bad value: strings quoted, numbers and booleans bare."""
    if isinstance(value, GoLiteral):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return orjson.dumps(value).decode()


def _field(path: list[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _at(obj: Any, path: list[str | int]) -> Any:
    for part in path:
        if isinstance(part, int):
            if not isinstance(obj, list) or part >= len(obj):
                return _NO_VALUE
        elif not isinstance(obj, dict) or part not in obj:
            return _NO_VALUE
        obj = obj[part]
    return obj


# kube-openapi's words for the bounds it reports as FieldValueInvalid
_BOUNDS = {"minLength": "should be at least {} chars long",
           "minimum": "should be greater than or equal to {}",
           "maximum": "should be less than or equal to {}",
           "maxProperties": "should have at most {} properties",
           "minProperties": "should have at least {} properties",
           "minItems": "should have at least {} items"}  # fmt: skip


def _kube_error(err: jsonschema_rs.ValidationError) -> FieldError:
    """jsonschema-rs's error as the apiextensions validator words it (kube-openapi texts)."""
    path = list(err.instance_path)
    kind: Any = err.kind  # a ValidationErrorKind subclass: its attributes depend on the keyword
    name, value = _field(path), err.instance
    where = f"{name} in body"
    match kind.name:
        case "required":
            return FieldError("FieldValueRequired", _field([*path, kind.property]))
        case "type":
            actual = _TYPE_NAMES.get(type(value), "object")
            types = [t for t in kind.types if t != "null"] or ["null"]
            return FieldError("FieldValueTypeInvalid", name,
                              f'{where} must be of type {types[0]}: "{actual}"', actual)
        case "enum":
            options = [v if isinstance(v, str) else _go_value(v) for v in kind.options]
            detail = "supported values: " + ", ".join(orjson.dumps(o).decode() for o in options)
            return FieldError("FieldValueNotSupported", name, detail, value)
        case "format":
            return FieldError("FieldValueTypeInvalid", name,
                              f"{where} must be of type {kind.format}: {_go_value(value)}", value)
        case "pattern":
            return FieldError("FieldValueInvalid", name, f"{where} should match '{kind.pattern}'",
                              value)
        case "maxLength":
            return FieldError("FieldValueTooLong", name, f"may not be longer than {kind.limit}",
                              value)
        case "maxItems":
            count = len(value) if isinstance(value, list) else value
            return FieldError("FieldValueTooMany", name, f"must have at most {kind.limit} items",
                              count)
    bound = _BOUNDS.get(kind.name)
    if bound is not None:
        return FieldError("FieldValueInvalid", name, f"{where} {bound.format(kind.limit)}", value)
    return FieldError("FieldValueInvalid", name, f"{where} {err.message}", value)


def _meta_errors(obj: Obj) -> Iterator[FieldError]:
    """What ValidateObjectMeta checks that clients hit: the name, label keys and values."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        yield FieldError("FieldValueRequired", "metadata.name", "name or generateName is required")
        return
    name = meta.get("name")
    if not name:
        yield FieldError("FieldValueRequired", "metadata.name", "name or generateName is required")
    elif not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        yield FieldError(
            "FieldValueInvalid", "metadata.name",
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character", name,
        )  # fmt: skip
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        yield FieldError("FieldValueTypeInvalid", "metadata.labels",
                         "metadata.labels in body must be of type object", labels)
        return
    for key, value in labels.items():
        prefix, _, label = key.rpartition("/")
        ok_key = (_LABEL_NAME.fullmatch(label) and len(label) <= 63
                  and (not prefix or _DNS_SUBDOMAIN.fullmatch(prefix)))  # fmt: skip
        if not ok_key:
            yield FieldError("FieldValueInvalid", "metadata.labels",
                             "name part must consist of alphanumeric characters, '-', '_' or "
                             "'.', and must start and end with an alphanumeric character", key)
        if not isinstance(value, str) or (
            value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value))
        ):
            yield FieldError("FieldValueInvalid", "metadata.labels", "a valid label must be an "
                             "empty string or consist of alphanumeric characters, '-', '_' or "
                             "'.', and must start and end with an alphanumeric character", value)


class StructuralSchema:
    """One CRD version's openAPIV3Schema: prune, then validate (with ratcheting on updates)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self._validator = jsonschema_rs.Draft202012Validator(
            to_json_schema(schema), validate_formats=True, formats={"date-time": _date_time}
        )

    def prune(self, obj: Obj) -> list[str]:
        """Drop the fields the schema does not know (in place); returns their paths."""
        pruned: list[str] = []
        _prune(obj, self.schema, [], pruned, root=True)
        return pruned

    def errors(self, obj: Obj, old: Obj | None = None) -> list[FieldError]:
        """Every error of `obj`; with `old` (an update), none at a value the write left as is."""
        out = list(_meta_errors(obj))
        for err in self._validator.iter_errors(obj):
            path = list(err.instance_path)
            if old is not None and _at(old, path) == _at(obj, path) is not _NO_VALUE:
                continue  # ratcheting: an unchanged value is not the write's fault
            out.append(_kube_error(err))
        return out


def _prune(value: Any, schema: Mapping[str, Any], path: list[str | int], pruned: list[str],
           *, root: bool = False) -> None:  # fmt: skip
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for k, v in value.items():
                _prune(v, extra, [*path, k], pruned)
            return
        keep = schema.get("x-kubernetes-preserve-unknown-fields") is True
        server = ("apiVersion", "kind", "metadata") if root else ()
        for k in list(value):
            if k in server:
                continue  # the API server's own fields: ObjectMeta is not the schema's
            if props is not None and k in props:
                _prune(value[k], props[k], [*path, k], pruned)
            elif not keep and (props is not None or schema.get("type") == "object"):
                pruned.append(_field([*path, k]))
                del value[k]
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            _prune(item, schema["items"], [*path, i], pruned)


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> KubeError:
    """422 Invalid, worded as apierrors.NewInvalid does (kubectl prints its message)."""
    texts = [str(e) for e in errors]
    listed = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = ({"name": name} if name else {}) | {"group": group, "kind": kind,
               "causes": [e.cause() for e in errors]}  # fmt: skip
    return KubeError(422, "Invalid", f'{kind}.{group} "{name}" is invalid: {listed}', details)
