"""Server-side printing: a meta.k8s.io/v1 Table of custom resources, from the CRD's
additionalPrinterColumns, as kube's CR table convertor builds it (kubectl get without -o asks
for it: Accept `application/json;as=Table;v=v1;g=meta.k8s.io`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import orjson

from zaroz_sim.kube.store import Obj

TABLE_V1 = "application/json;as=Table;v=v1;g=meta.k8s.io"
_TABLE_BETA = "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
_NAME_COLUMN = {"name": "Name", "type": "string", "format": "name", "priority": 0,
                "description": "Name must be unique within a namespace. Is required when creating "
                "resources, although some resources may allow a client to request the generation "
                "of an appropriate name automatically. Name is primarily intended for creation "
                "idempotence and configuration definition. Cannot be updated. More info: "
                "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"}
_AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def wants_table(accept: str) -> str | None:
    """The Table media type the client accepts first, if any (v1, then v1beta1)."""
    for part in accept.split(","):
        params = [p.strip() for p in part.split(";")]
        kind = ";".join(sorted(p for p in params if not p.startswith("q=")))
        for table in (TABLE_V1, _TABLE_BETA):
            if kind == ";".join(sorted(table.split(";"))):
                return table
    return None


def columns_of(version: Mapping[str, Any]) -> list[Obj]:
    """The CRD version's printer columns (Age alone when it declares none), with Name first."""
    declared = version.get("additionalPrinterColumns") or [_AGE_COLUMN]
    return [dict(_NAME_COLUMN)] + [
        {"name": c["name"], "type": c["type"], "format": c.get("format", ""),
         "description": c.get("description") or
         f"Custom resource definition column (in JSONPath format): {c['jsonPath']}",
         "priority": c.get("priority", 0), "jsonPath": c["jsonPath"]}
        for c in declared
    ]  # fmt: skip


def _find(obj: Any, path: str) -> Any:
    """A simple JSONPath (.a.b[0].c); None when any step is missing."""
    for key, index in _STEP.findall(path):
        if key:
            if not isinstance(obj, dict) or key not in obj:
                return None
            obj = obj[key]
        else:
            if not isinstance(obj, list) or int(index) >= len(obj):
                return None
            obj = obj[int(index)]
    return obj


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration (what kubectl shows as AGE)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24 % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _cell(kind: str, value: Any, now_s: float) -> Any:
    if value is None:
        return None
    if kind == "date":
        if not isinstance(value, str):
            return "<invalid>"
        try:
            t = datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return "<invalid>"
        return human_duration(now_s - t)
    if kind == "string":
        return value if isinstance(value, str) else orjson.dumps(value).decode()
    return value


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"]}  # fmt: skip


def rows(objects: Iterable[Obj], columns: list[Obj], now_s: float, include: str) -> list[Obj]:
    out = []
    for obj in objects:
        cells = [obj["metadata"]["name"]] + [
            _cell(c["type"], _find(obj, c["jsonPath"]), now_s) for c in columns[1:]]
        row: Obj = {"cells": cells}
        shown = _row_object(obj, include)
        if shown is not None:
            row["object"] = shown
        out.append(row)
    return out


def table(objects: Iterable[Obj], columns: list[Obj], now_s: float, *,
          meta: Mapping[str, Any] | None = None, include: str = "Metadata",
          headers: bool = True) -> Obj:  # fmt: skip
    """The Table (its columnDefinitions left out when `headers` is false, as for a watch's
    later events)."""
    definitions = [{k: v for k, v in c.items() if k != "jsonPath"} for c in columns]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": dict(meta or {}),
            "columnDefinitions": definitions if headers else None,
            "rows": rows(objects, columns, now_s, include)}  # fmt: skip
