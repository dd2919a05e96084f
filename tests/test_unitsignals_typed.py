"""Typed decoding (msgspec) of UnitSignals: the model gives exactly what the untyped path gives,
reads the spec only when the generation moves, and whatever does not fit the types is still
decoded (untyped) instead of lost."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from exporter.model import unitsignals
from exporter.model.observations import Recorder
from exporter.model.signal import UnitSignal, to_dict
from exporter.sources.http import TransportError, Unauthorized
from exporter.sources.kube.api import _decode_typed_event
from exporter.sources.kube.handler import object_key, resource_version
from exporter.sources.kube.typed import decode_event, decode_list
from tests.test_unitsignals_fast_path import run, writes
from tests.unitsignals import T0, status, unitsignal


def typed(obj: dict[str, Any]) -> UnitSignal:
    ev = decode_event(orjson.dumps({"type": "MODIFIED", "object": obj}))
    assert ev is not None and type(ev[1]) is UnitSignal
    return ev[1]


def with_managed_fields(history: list[tuple[float, dict]]) -> list[tuple[float, dict]]:
    """Objects as the API server sends them: managedFields saying when the spec was written."""
    out = []
    for now, obj in history:
        meta = dict(obj["metadata"])
        meta["managedFields"] = unitsignal(spec_written=now - 30)["metadata"]["managedFields"]
        out.append((now, {**obj, "metadata": meta}))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_typed_objects_give_what_dicts_give(seed):
    history = with_managed_fields(writes(seed))
    as_dicts = run(history, fast=True)
    as_typed = run([(now, typed(obj)) for now, obj in history], fast=True)
    assert as_typed[0] == as_dicts[0]  # observations and per-object states
    assert as_typed[1] == as_dicts[1]  # the exposition
    assert as_typed[2] == as_dicts[2] > 0  # the status-only path taken as often


def test_the_spec_is_decoded_only_when_the_generation_moves(monkeypatch):
    history = with_managed_fields(writes(3))
    decoded: list[bytes] = []
    real = unitsignals.raw_value

    def counting(raw: Any) -> Any:
        decoded.append(bytes(raw))
        return real(raw)

    monkeypatch.setattr(unitsignals, "raw_value", counting)
    model = unitsignals.UnitSignalModel(Recorder(), ("team",))
    expected = 0
    seen: dict[str, Any] = {}
    for now, obj in history:
        meta = obj["metadata"]
        if seen.get(meta["name"]) != meta["generation"]:
            expected += 1  # first sight or a new generation: the spec is read
            seen[meta["name"]] = meta["generation"]
        model.upsert(typed(obj), now)
    specs = [b for b in decoded if b.startswith(b'{"unitId"')]
    assert len(specs) == expected < len(history) // 3
    # managedFields only for a generation found pending at first sight, never on status writes
    assert len(decoded) - len(specs) <= len(seen)


def test_what_does_not_fit_the_types_is_decoded_untyped():
    odd = unitsignal("u1", status_=status())
    odd["metadata"]["labels"]["team"] = 7  # not a string: kube would refuse it, we must not crash
    line = orjson.dumps({"type": "MODIFIED", "object": odd})
    assert decode_event(line) is None
    type_, obj = _decode_typed_event(line)
    assert type_ == "MODIFIED" and obj == odd
    fine = unitsignal("u2", status_=status())
    type_, obj = _decode_typed_event(orjson.dumps({"type": "ADDED", "object": fine}))
    assert type(obj) is UnitSignal and object_key(obj) == ("team-a", "u2")
    assert resource_version(obj) == "1"
    assert to_dict(obj) == {k: v for k, v in fine.items() if k in ("metadata", "spec")} | {
        "status": fine["status"]}
    m = unitsignals.UnitSignalModel(Recorder())
    assert m.upsert(obj, T0) == m.upsert(fine, T0) == ("team-a", "u2")


def test_typed_watch_errors_are_the_untyped_ones():
    status_ = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "forbidden", "reason": "Forbidden", "code": 403}
    with pytest.raises(Unauthorized):
        _decode_typed_event(orjson.dumps({"type": "ERROR", "object": status_}))
    with pytest.raises(TransportError):
        _decode_typed_event(b'{"type":"MODIFIED","object":{"metadata":')
    with pytest.raises(TransportError):
        _decode_typed_event(b'{"type":"MODIFIED"}')


def test_a_typed_list_page():
    objs = [unitsignal(f"u{i}", status_=status()) for i in range(3)]
    body = orjson.dumps({"apiVersion": "units.zaroz.cloud/v1", "kind": "UnitSignalList",
                         "metadata": {"resourceVersion": "42", "continue": "abc"},
                         "items": objs})
    page = decode_list(body)
    assert page is not None
    items, rv, cont = page
    assert (rv, cont) == ("42", "abc")
    assert [object_key(o) for o in items] == [("team-a", f"u{i}") for i in range(3)]
    objs[1]["metadata"]["generation"] = "2"  # does not fit: the whole page goes untyped
    assert decode_list(orjson.dumps({"metadata": {"resourceVersion": "1"}, "items": objs})) is None
