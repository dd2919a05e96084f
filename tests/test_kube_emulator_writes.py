"""The emulator's write path as kube-apiserver's for a CRD with a status subresource: create,
update, merge patch (RFC 7386), JSON patch (RFC 6902), apply, delete, in-process and over HTTP,
validated against deploy/'s CRD (422 Invalid with causes), 409 on a stale resourceVersion."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from zaroz_sim.kube.emulator import KubeEmulator, KubeError
from zaroz_sim.kube.validate import StructuralSchema

API = "/apis/units.zaroz.cloud/v1"
NS = f"{API}/namespaces/ns/unitsignals"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSONP = {"Content-Type": "application/json-patch+json"}


def spec(key: str = "k1", **over: Any) -> dict[str, Any]:
    return {"unitId": f"unit-{key}", "key": key, "contractVersion": 1, "generation": 1} | over


def unitsignal(name: str = "u1", **spec_over: Any) -> dict[str, Any]:
    return {"apiVersion": "units.zaroz.cloud/v1", "kind": "UnitSignal",
            "metadata": {"name": name, "labels": {"team": "blue"}}, "spec": spec(**spec_over)}


def status(**over: Any) -> dict[str, Any]:
    return {"observedGeneration": 1, "agentVersion": "1.4.2", "accepting": True, "seq": 1,
            "signalledReady": "2026-01-01T00:00:00Z", "activity": "idle"} | over


@pytest.fixture
def emu() -> KubeEmulator:
    return KubeEmulator(seed=7)


class Http:
    def __init__(self, base: str, session: aiohttp.ClientSession) -> None:
        self.base, self.session = base, session

    async def send(self, method: str, path: str, body: Any = None,
                   headers: dict[str, str] | None = None, **query: str) -> tuple[int, Any, Any]:
        data = body if isinstance(body, bytes | None) else orjson.dumps(body)
        hdrs = {"Content-Type": "application/json"} | (headers or {})
        async with self.session.request(method, self.base + path, data=data, headers=hdrs,
                                        params=query) as r:
            return r.status, orjson.loads(await r.read()), r.headers


@pytest.fixture
async def http(emu: KubeEmulator) -> AsyncIterator[Http]:
    base = await emu.start()
    async with aiohttp.ClientSession() as session:
        yield Http(base, session)
    await emu.stop()


# -- in process (what the simulator calls) -----------------------------------------------------


def test_create_drops_status_and_starts_at_generation_one(emu: KubeEmulator) -> None:
    obj = emu.create_object("ns", unitsignal() | {"status": status()})
    assert "status" not in obj
    assert obj["metadata"]["generation"] == 1 and obj["metadata"]["namespace"] == "ns"
    assert obj["metadata"]["labels"] == {"team": "blue"}
    assert obj["metadata"]["resourceVersion"] == str(emu.resource_version)
    with pytest.raises(KubeError) as err:
        emu.create_object("ns", unitsignal())
    assert err.value.code == 409 and err.value.reason == "AlreadyExists"


def test_status_merge_patch_deletes_nulls_and_never_bumps_generation(emu: KubeEmulator) -> None:
    emu.create_object("ns", unitsignal())
    obj = emu.patch_object("ns", "u1", {"status": status()}, subresource="status")
    assert obj["status"]["activity"] == "idle" and obj["metadata"]["generation"] == 1
    obj = emu.patch_object("ns", "u1", {"status": {"activity": None, "seq": 2}},
                           subresource="status")
    assert "activity" not in obj["status"] and obj["status"]["seq"] == 2
    assert obj["metadata"]["generation"] == 1
    # a status patch cannot touch the spec, a main-resource patch cannot touch the status
    obj = emu.patch_object("ns", "u1", {"spec": {"key": "other"}, "status": {"seq": 3}},
                           subresource="status")
    assert obj["spec"]["key"] == "k1" and obj["status"]["seq"] == 3
    obj = emu.patch_object("ns", "u1", {"spec": {"generation": 2}, "status": {"seq": 9}})
    assert obj["status"]["seq"] == 3 and obj["spec"]["generation"] == 2
    assert obj["metadata"]["generation"] == 2
    managers = {(m["manager"], m.get("subresource")) for m in obj["metadata"]["managedFields"]}
    assert managers == {("kernel", None), ("zaroz-agent", "status")}


def test_spec_merge_patch_with_null_deletes_and_label_patch_keeps_generation(
    emu: KubeEmulator,
) -> None:
    emu.create_object("ns", unitsignal(userData={"a": 1}, allocation={"id": "a1",
                                                                      "generation": 1}))
    obj = emu.patch_object("ns", "u1", {"spec": {"allocation": None}})
    assert "allocation" not in obj["spec"] and obj["spec"]["userData"] == {"a": 1}
    assert obj["metadata"]["generation"] == 2
    rv = obj["metadata"]["resourceVersion"]
    obj = emu.patch_object("ns", "u1", {"metadata": {"labels": {"team": None, "x": "y"}}})
    assert obj["metadata"]["labels"] == {"x": "y"} and obj["metadata"]["generation"] == 2
    same = emu.patch_object("ns", "u1", {"spec": {"key": "k1"}})  # changes nothing: no write
    assert same["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"] != rv


def test_json_patch_and_update_with_resource_version(emu: KubeEmulator) -> None:
    emu.create_object("ns", unitsignal())
    obj = emu.patch_object("ns", "u1", [{"op": "replace", "path": "/spec/generation", "value": 5},
                                        {"op": "add", "path": "/spec/draining", "value": "stop"}],
                           "json")
    assert (obj["spec"]["generation"], obj["spec"]["draining"]) == (5, "stop")
    with pytest.raises(KubeError) as err:
        emu.patch_object("ns", "u1", [{"op": "test", "path": "/spec/generation", "value": 1}],
                         "json")
    assert err.value.code == 422
    stale = dict(obj, metadata=obj["metadata"] | {"resourceVersion": "2"})
    with pytest.raises(KubeError) as err:
        emu.update_object("ns", "u1", stale)
    assert err.value.code == 409 and err.value.reason == "Conflict"
    unconditional = dict(obj, metadata={k: v for k, v in obj["metadata"].items()
                                        if k != "resourceVersion"})
    with pytest.raises(KubeError) as err:
        emu.update_object("ns", "u1", unconditional)
    assert err.value.code == 422 and "resourceVersion" in err.value.message
    updated = emu.update_object("ns", "u1", obj | {"status": status()}, subresource="status")
    assert updated["status"]["seq"] == 1 and updated["metadata"]["generation"] == 2


@pytest.mark.parametrize(("over", "field", "reason"), [
    ({"key": "Not A Valid Key"}, "spec.key", "FieldValueInvalid"),
    ({"contractVersion": 2}, "spec.contractVersion", "FieldValueNotSupported"),
    ({"generation": "one"}, "spec.generation", "FieldValueTypeInvalid"),
    ({"generation": -1}, "spec.generation", "FieldValueInvalid"),
    ({"unitId": "u" * 129}, "spec.unitId", "FieldValueTooLong"),
    ({"draining": "sideways"}, "spec.draining", "FieldValueNotSupported"),
    ({"allocation": {"id": "a"}}, "spec.allocation.generation", "FieldValueRequired"),
    ({"allocation": {"id": "a", "generation": 1, "allocatedAt": "noon"}},
     "spec.allocation.allocatedAt", "FieldValueTypeInvalid"),
])
def test_invalid_specs_are_refused_with_kube_causes(
    emu: KubeEmulator, over: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(KubeError) as err:
        emu.create_object("ns", unitsignal(**over))
    status_ = err.value.status()
    assert status_["code"] == 422 and status_["reason"] == "Invalid"
    assert status_["details"]["kind"] == "UnitSignal" and status_["details"]["name"] == "u1"
    assert [(c["field"], c["reason"]) for c in status_["details"]["causes"]] == [(field, reason)]
    assert status_["message"].startswith(f'UnitSignal.units.zaroz.cloud "u1" is invalid: {field}')
    assert not emu.store.objects


def test_the_pattern_message_is_kubes(emu: KubeEmulator) -> None:
    with pytest.raises(KubeError) as err:
        emu.create_object("ns", unitsignal(key="Not A Valid Key"))
    assert err.value.status()["details"]["causes"][0]["message"] == (
        'Invalid value: "Not A Valid Key": spec.key in body should match '
        "'^[a-z0-9]([a-z0-9-]*[a-z0-9])?$'")


def test_status_is_validated_and_nullable_fields_may_be_absent(emu: KubeEmulator) -> None:
    emu.create_object("ns", unitsignal())
    minimal = {"observedGeneration": 1, "agentVersion": "1", "accepting": False, "seq": 0}
    obj = emu.patch_object("ns", "u1", {"status": minimal}, subresource="status")
    assert obj["status"] == minimal
    for bad, field in (({"seq": -1}, "status.seq"), ({"activity": "asleep"}, "status.activity"),
                       ({"accepting": None}, "status.accepting"),
                       ({"signalledReady": "soon"}, "status.signalledReady")):
        with pytest.raises(KubeError) as err:
            emu.patch_object("ns", "u1", {"status": bad}, subresource="status")
        assert [c["field"] for c in err.value.status()["details"]["causes"]] == [field]
    with pytest.raises(KubeError) as err:
        emu.patch_object("ns", "u1", {"status": {"seq": None}}, subresource="status")
    assert err.value.status()["details"]["causes"][0]["reason"] == "FieldValueRequired"


def test_a_bad_value_already_stored_does_not_block_other_writes(emu: KubeEmulator) -> None:
    """Ratcheting (kube 1.30+): a spec written before the schema tightened stays patchable."""
    emu.create("ns", "old", spec(key="Not A Valid Key"))  # the trusted store write
    obj = emu.patch_object("ns", "old", {"status": status()}, subresource="status")
    assert obj["status"]["seq"] == 1
    with pytest.raises(KubeError):
        emu.patch_object("ns", "old", {"spec": {"key": "Still Bad"}})


def test_unknown_fields_are_pruned_where_the_schema_is_closed(emu: KubeEmulator) -> None:
    obj = emu.create_object("ns", unitsignal(extra={"kept": True}) | {"junk": 1})
    assert "junk" not in obj and obj["spec"]["extra"] == {"kept": True}


def test_delete_and_preconditions(emu: KubeEmulator) -> None:
    created = emu.create_object("ns", unitsignal())
    with pytest.raises(KubeError) as err:
        emu.writer.delete("ns", "u1", {"preconditions": {"uid": "other"}})
    assert err.value.code == 409
    gone = emu.delete_object("ns", "u1")
    assert gone["metadata"]["uid"] == created["metadata"]["uid"]
    assert emu.store.history[-1].type == "DELETED"
    with pytest.raises(KubeError) as err:
        emu.delete_object("ns", "u1")
    assert err.value.code == 404


def test_every_write_the_schema_admits_round_trips_through_the_crd() -> None:
    """The CRD's status schema admits what RFC 7386 leaves: no nullable field is required."""
    emu = KubeEmulator()
    root = emu.crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in ("spec", "status"):
        node = root["properties"][part]
        assert not [k for k in node.get("required", [])
                    if node["properties"][k].get("nullable")], part
    assert StructuralSchema(root).errors(
        {"apiVersion": "units.zaroz.cloud/v1", "kind": "UnitSignal", "metadata": {"name": "a"},
         "spec": spec(), "status": {"observedGeneration": 1, "agentVersion": "1",
                                    "accepting": True, "seq": 1}}) == []


# -- over HTTP (what kubectl and the Python client send) ----------------------------------------


async def test_http_create_get_patch_delete(emu: KubeEmulator, http: Http) -> None:
    code, body, _ = await http.send("POST", NS, unitsignal(), fieldManager="kubectl-create")
    assert code == 201 and body["metadata"]["managedFields"][0]["manager"] == "kubectl-create"
    code, body, _ = await http.send("PATCH", f"{NS}/u1", {"spec": {"draining": "stop"}}, MERGE)
    assert code == 200 and body["spec"]["draining"] == "stop"
    assert body["metadata"]["generation"] == 2
    code, body, _ = await http.send("PATCH", f"{NS}/u1/status", {"status": status()}, MERGE)
    assert code == 200 and body["status"]["seq"] == 1 and body["metadata"]["generation"] == 2
    ops = [{"op": "remove", "path": "/status/activity"}]
    code, body, _ = await http.send("PATCH", f"{NS}/u1/status", ops, JSONP)
    assert code == 200 and "activity" not in body["status"]
    code, body, _ = await http.send("PUT", f"{NS}/u1", body | {"spec": spec(generation=3)})
    assert code == 200 and body["spec"]["generation"] == 3
    code, body, _ = await http.send("PUT", f"{NS}/u1", body)  # its rv is current, same content
    assert code == 200
    stale = body | {"metadata": body["metadata"] | {"resourceVersion": "1"}}
    code, body, _ = await http.send("PUT", f"{NS}/u1", stale)
    assert code == 409 and body["reason"] == "Conflict"
    code, body, _ = await http.send("DELETE", f"{NS}/u1", {"propagationPolicy": "Background"})
    assert code == 200 and body["metadata"]["name"] == "u1"
    code, body, _ = await http.send("GET", f"{NS}/u1")
    assert code == 404 and body["reason"] == "NotFound"


async def test_http_refusals(emu: KubeEmulator, http: Http) -> None:
    code, body, _ = await http.send("POST", NS, unitsignal(key="Not A Valid Key"))
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec.key"
    code, body, _ = await http.send("POST", NS, unitsignal() | {"junk": 1},
                                    fieldValidation="Strict")
    assert code == 400 and 'unknown field "junk"' in body["message"]
    code, body, headers = await http.send("POST", NS, unitsignal() | {"junk": 1})
    assert code == 201 and "junk" in headers["Warning"]
    code, body, _ = await http.send("PATCH", f"{NS}/u1", {"spec": {}},
                                    {"Content-Type": "application/strategic-merge-patch+json"})
    assert code == 415 and body["reason"] == "UnsupportedMediaType"
    code, body, _ = await http.send("POST", f"{API}/unitsignals", unitsignal("u2"))
    assert code == 405 and body["reason"] == "MethodNotAllowed"
    other = unitsignal("u3") | {"metadata": {"name": "u3", "namespace": "elsewhere"}}
    code, body, _ = await http.send("POST", NS, other)
    assert code == 400
    code, body, _ = await http.send("POST", NS, unitsignal("u4"), dryRun="All")
    assert code == 200 and "ns/u4" not in emu.store.objects


async def test_http_apply_and_delete_collection(emu: KubeEmulator, http: Http) -> None:
    apply = {"Content-Type": "application/apply-patch+yaml"}
    manifest = orjson.dumps(unitsignal("a1"))  # JSON is YAML
    code, body, _ = await http.send("PATCH", f"{NS}/a1", manifest, apply)
    assert code == 422  # apply needs a fieldManager
    code, body, _ = await http.send("PATCH", f"{NS}/a1", manifest, apply, fieldManager="me")
    assert code == 201 and body["spec"]["key"] == "k1"
    changed = orjson.dumps(unitsignal("a1", key="k2"))
    code, body, _ = await http.send("PATCH", f"{NS}/a1", changed, apply, fieldManager="me")
    assert code == 200 and body["spec"]["key"] == "k2" and body["metadata"]["generation"] == 2
    emu.create_object("ns", unitsignal("b1") | {"metadata": {"name": "b1",
                                                             "labels": {"team": "red"}}})
    code, body, _ = await http.send("DELETE", NS, labelSelector="team=blue")
    assert code == 200 and [o["metadata"]["name"] for o in body["items"]] == ["a1"]
    assert list(emu.store.objects) == ["ns/b1"]


def test_server_side_apply_owns_fields_and_drops_what_it_no_longer_applies(
    emu: KubeEmulator,
) -> None:
    config = unitsignal("s1", draining="stop", userData={"a": 1})
    obj = emu.patch_object("ns", "s1", config, "apply", manager="ops")
    entry = obj["metadata"]["managedFields"][0]
    assert (entry["manager"], entry["operation"]) == ("ops", "Apply")
    assert "f:draining" in entry["fieldsV1"]["f:spec"]
    del config["spec"]["draining"]
    obj = emu.patch_object("ns", "s1", config, "apply", manager="ops")
    assert "draining" not in obj["spec"] and obj["spec"]["userData"] == {"a": 1}
    assert obj["metadata"]["generation"] == 2
    # a field another manager wrote stays when the applier stops applying it
    emu.patch_object("ns", "s1", {"spec": {"allocation": {"id": "a", "generation": 1}}},
                     manager="kernel")
    del config["spec"]["userData"]
    obj = emu.patch_object("ns", "s1", config, "apply", manager="ops")
    assert obj["spec"]["allocation"] == {"id": "a", "generation": 1}
