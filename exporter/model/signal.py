"""The model's typed input: a UnitSignal as the exporter reads it (decoded by
`exporter.sources.kube.typed`), metadata typed and spec, status and managedFields kept as the
JSON bytes they came as, decoded only when the model needs them (`raw_value`)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from exporter.model.ranges import INT_MAX, INT_MIN

__all__ = ["RAW_ABSENT", "Meta", "Status", "UnitSignal", "decode_status", "raw_value",
           "status_value", "to_dict"]

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

# An integer the model holds (model/ranges.py), checked in C as it is decoded.
Int64 = Annotated[int, msgspec.Meta(ge=INT_MIN, le=INT_MAX)]


class Status(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """A status as the model reads it, its integers bounded at decode: only a status whose
    fields are these and whose integers fit decodes so (`status_value`); any other is decoded
    untyped and checked field by field, as before. Validity stays the schema's: the fields'
    types are only what the model's fast path may assume (its times are still checked)."""

    observedGeneration: Int64 | None = None
    agentVersion: Any = None
    signalledReady: str | None = None
    accepting: Any = None
    activity: Any = None
    activitySince: str | None = None
    shutdownRequestedAt: str | None = None
    allocationAck: Any = None
    seq: Int64 | None = None


# Raises msgspec.ValidationError for a status that does not fit (the model's hot path catches
# it inline; `status_value` is the same as a call).
decode_status = msgspec.json.Decoder(Status).decode


def status_value(raw: msgspec.Raw) -> Status | None:
    """A raw status typed; None when it does not fit `Status` (decode it untyped instead)."""
    try:
        return decode_status(raw)
    except msgspec.ValidationError:
        return None


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
