"""The model's typed input: a UnitSignal as the exporter reads it (decoded by
`exporter.sources.kube.typed`), metadata typed and spec, status and managedFields kept as the
JSON bytes they came as, decoded only when the model needs them (`raw_value`)."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["RAW_ABSENT", "Meta", "UnitSignal", "raw_value", "to_dict"]

RAW_ABSENT = msgspec.Raw()  # a field the object does not have


# gc=False: never tracked by the cyclic collector (they hold only strings, ints, a dict of
# strings and Raw bytes, so no cycle can go through them): one decoded event no longer adds
# three objects towards the next young collection.
class Meta(msgspec.Struct, gc=False):
    """The metadata fields read; every other one is skipped by the parser."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resourceVersion: str | None = None
    generation: int | None = None
    creationTimestamp: str | None = None
    labels: dict[str, str] | None = None
    managedFields: msgspec.Raw = RAW_ABSENT


class UnitSignal(msgspec.Struct, gc=False):
    """One object: metadata typed, spec and status as the bytes they were sent as."""

    metadata: Meta
    spec: msgspec.Raw = RAW_ABSENT
    status: msgspec.Raw = RAW_ABSENT



_loads = msgspec.json.Decoder().decode  # takes a Raw as it is (orjson needs a copy)


def raw_value(raw: msgspec.Raw) -> Any:
    """A raw part as plain values (None when absent or null)."""
    return _loads(raw) if len(raw) else None


def to_dict(obj: UnitSignal) -> dict[str, Any]:
    """The plain form of a typed object, with the fields it kept (for tests and fallbacks)."""
    m = obj.metadata
    meta = {k: v for k in Meta.__struct_fields__ if k != "managedFields"
            and (v := getattr(m, k)) is not None}
    if len(m.managedFields):
        meta["managedFields"] = raw_value(m.managedFields)
    out: dict[str, Any] = {"metadata": meta}
    if len(obj.spec):
        out["spec"] = raw_value(obj.spec)
    if len(obj.status):
        out["status"] = raw_value(obj.status)
    return out
