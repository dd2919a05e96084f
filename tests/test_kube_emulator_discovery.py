"""Discovery, OpenAPI v3, the CRD object and Table output of the emulator, as kube-apiserver 1.32
serves them; the verbs discovery lists are exactly those that answer."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from zaroz_sim.kube.discovery import AGGREGATED
from zaroz_sim.kube.emulator import KubeEmulator
from zaroz_sim.kube.table import TABLE_V1, human_duration

API = "/apis/units.zaroz.cloud/v1"
NS = f"{API}/namespaces/ns/unitsignals"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
T0 = 1_800_000_000 * 10**9


def spec(i: int) -> dict[str, Any]:
    return {"unitId": f"unit-{i}", "key": f"k{i}", "contractVersion": 1, "generation": 1}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    e = KubeEmulator(seed=3, clock=Clock())
    e.create("ns", "u1", spec(1), status={"observedGeneration": 1, "agentVersion": "1",
                                          "accepting": True, "seq": 1, "activity": "busy"})
    await e.start()
    yield e
    await e.stop()


@pytest.fixture
async def get(emu: KubeEmulator) -> AsyncIterator[Any]:
    async with aiohttp.ClientSession() as session:

        async def fetch(path: str, accept: str = "application/json",
                        **query: str) -> tuple[int, Any, str]:  # fmt: skip
            async with session.get(emu.url + path, headers={"Accept": accept},
                                   params=query) as r:
                return r.status, orjson.loads(await r.read()), r.headers["Content-Type"]

        yield fetch


async def test_legacy_discovery(get: Any) -> None:
    code, body, _ = await get("/version")
    assert code == 200 and (body["major"], body["minor"]) == ("1", "32")
    code, body, _ = await get("/api")
    assert body["kind"] == "APIVersions" and body["versions"] == ["v1"]
    code, body, _ = await get("/apis")
    assert body["kind"] == "APIGroupList"
    assert {g["name"]: g["preferredVersion"]["groupVersion"] for g in body["groups"]} == {
        "apiextensions.k8s.io": "apiextensions.k8s.io/v1",
        "units.zaroz.cloud": "units.zaroz.cloud/v1"}
    code, body, _ = await get("/apis/units.zaroz.cloud")
    assert body["kind"] == "APIGroup" and body["versions"][0]["version"] == "v1"
    code, body, _ = await get(API)
    assert {r["name"] for r in body["resources"]} == {"unitsignals", "unitsignals/status"}
    code, body, _ = await get("/apis/nothing.example.com")
    assert code == 404 and body["reason"] == "NotFound"


async def test_aggregated_discovery_when_asked_in_accept(get: Any) -> None:
    accept = f"{AGGREGATED},application/json"  # what kubectl 1.32 sends, v2beta1 aside
    code, body, ctype = await get("/apis", accept)
    assert code == 200 and ctype == AGGREGATED and body["kind"] == "APIGroupDiscoveryList"
    groups = {i["metadata"]["name"]: i for i in body["items"]}
    resource = groups["units.zaroz.cloud"]["versions"][0]["resources"][0]
    assert resource["resource"] == "unitsignals" and resource["scope"] == "Namespaced"
    assert resource["responseKind"] == {"group": "units.zaroz.cloud", "version": "v1",
                                        "kind": "UnitSignal"}
    assert resource["subresources"][0]["subresource"] == "status"
    code, body, ctype = await get("/api", accept)
    assert ctype == AGGREGATED and body["items"][0]["versions"][0]["version"] == "v1"


async def test_the_verbs_listed_are_the_verbs_that_answer(emu: KubeEmulator, get: Any) -> None:
    """Every listed verb answers something other than 405; the unlisted ones answer 405."""
    _, body, _ = await get(API)
    listed = {r["name"]: set(r["verbs"]) for r in body["resources"]}
    obj = emu.get("ns", "u1")
    calls = {  # verb -> (method, path, query, body, content type)
        "get": ("GET", f"{NS}/u1", {}, None, "application/json"),
        "list": ("GET", NS, {}, None, "application/json"),
        "watch": ("GET", NS, {"watch": "1", "timeoutSeconds": "1"}, None, "application/json"),
        "create": ("POST", NS, {"dryRun": "All"}, {"apiVersion": "units.zaroz.cloud/v1",
                   "kind": "UnitSignal", "metadata": {"name": "n"}, "spec": spec(2)},
                   "application/json"),
        "update": ("PUT", f"{NS}/u1", {"dryRun": "All"}, obj, "application/json"),
        "patch": ("PATCH", f"{NS}/u1", {"dryRun": "All"}, {}, "application/merge-patch+json"),
        "delete": ("DELETE", f"{NS}/u1", {"dryRun": "All"}, None, "application/json"),
        "deletecollection": ("DELETE", NS, {"dryRun": "All"}, None, "application/json"),
    }  # fmt: skip
    async with aiohttp.ClientSession() as session:
        for resource, suffix in (("unitsignals", ""), ("unitsignals/status", "/status")):
            for verb, (method, path, query, payload, ctype) in calls.items():
                if suffix and path == NS:
                    continue  # a subresource has no collection
                data = None if payload is None else orjson.dumps(payload)
                async with session.request(method, emu.url + path + suffix, params=query,
                                           data=data, headers={"Content-Type": ctype}) as r:
                    await r.read()
                    if verb in listed[resource]:
                        assert r.status < 400, (resource, verb, r.status)
                    else:
                        assert r.status == 405, (resource, verb, r.status)
    assert "ns/u1" in emu.store.objects  # dry runs only


async def test_openapi_v3_publishes_the_crds_schema(emu: KubeEmulator, get: Any) -> None:
    code, index, _ = await get("/openapi/v3")
    url = index["paths"]["apis/units.zaroz.cloud/v1"]["serverRelativeURL"]
    code, doc, _ = await get(url.split("?")[0])
    assert code == 200 and doc["openapi"].startswith("3.")
    schema = doc["components"]["schemas"]["cloud.zaroz.units.v1.UnitSignal"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "units.zaroz.cloud", "version": "v1", "kind": "UnitSignal"}]
    crd_schema = emu.crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"] == crd_schema["properties"]["spec"]
    ref = schema["properties"]["metadata"]["allOf"][0]["$ref"].split("/")[-1]
    assert ref in doc["components"]["schemas"]
    patch = doc["paths"][f"{API}/namespaces/{{namespace}}/unitsignals/{{name}}"]["patch"]
    assert {"fieldValidation", "dryRun"} <= {p["name"] for p in patch["parameters"]}
    emu.uninstall_crd()
    code, index, _ = await get("/openapi/v3")
    assert index["paths"] == {}
    assert (await get(url.split("?")[0]))[0] == 404


async def test_table_has_the_printer_columns(emu: KubeEmulator, get: Any) -> None:
    emu.store.clock.now += 125 * 10**9  # type: ignore[attr-defined]
    code, body, _ = await get(NS, f"{TABLE_V1},application/json")
    assert code == 200 and body["kind"] == "Table"
    names = [c["name"] for c in body["columnDefinitions"]]
    assert names == ["Name", "Unit", "Generation", "Observed", "Ready", "Accepting", "Activity",
                     "Draining", "Age"]
    row = body["rows"][0]
    assert row["cells"] == ["u1", "unit-1", 1, 1, None, True, "busy", None, "2m5s"]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["name"] == "u1"
    assert body["metadata"]["resourceVersion"] == str(emu.resource_version)
    code, body, _ = await get(f"{NS}/u1", TABLE_V1, includeObject="Object")
    assert body["rows"][0]["object"]["spec"] == spec(1)
    code, body, _ = await get(NS)  # no Table asked: the list
    assert body["kind"] == "UnitSignalList"


@pytest.mark.parametrize(("seconds", "shown"), [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (125, "2m5s"),
    (600, "10m"), (3 * 3600 - 1, "179m"), (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"),
    (8 * 3600, "8h"), (48 * 3600, "2d"), (49 * 3600, "2d1h"), (8 * 86400, "8d"),
    (2 * 365 * 86400, "2y"), (2 * 365 * 86400 + 86400, "2y1d"), (9 * 365 * 86400, "9y"),
])
def test_age_is_kubes_human_duration(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


async def test_the_crd_object_comes_and_goes(emu: KubeEmulator, get: Any) -> None:
    code, crd, _ = await get(f"{CRDS}/unitsignals.units.zaroz.cloud")
    assert code == 200 and crd["kind"] == "CustomResourceDefinition"
    assert crd["spec"] == emu.crd["spec"]
    assert {c["type"] for c in crd["status"]["conditions"]} == {"NamesAccepted", "Established"}
    async with (aiohttp.ClientSession() as session,
                session.get(emu.url + CRDS, params={"watch": "1"}) as watch):
            first = orjson.loads(await asyncio.wait_for(watch.content.readline(), 5))
            assert first["type"] == "ADDED"
            emu.uninstall_crd()
            gone = orjson.loads(await asyncio.wait_for(watch.content.readline(), 5))
            assert gone["type"] == "DELETED"
            assert gone["object"]["metadata"]["name"] == "unitsignals.units.zaroz.cloud"
            code, body, _ = await get(f"{CRDS}/unitsignals.units.zaroz.cloud")
            assert code == 404
            code, body, _ = await get(CRDS)
            assert body["kind"] == "CustomResourceDefinitionList" and body["items"] == []
            assert (await get("/apis/units.zaroz.cloud"))[0] == 404
            emu.install_crd()
            back = orjson.loads(await asyncio.wait_for(watch.content.readline(), 5))
            assert back["type"] == "ADDED"
            assert back["object"]["metadata"]["uid"] != first["object"]["metadata"]["uid"]


def test_emulator_and_watch_import_each_other_in_one_direction_only() -> None:
    """zaroz_sim/kube's modules form no import cycle (emulator -> watch, never back)."""
    root = Path(__file__).resolve().parent.parent / "zaroz_sim" / "kube"
    graph: dict[str, set[str]] = {}
    for path in root.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            if isinstance(node, ast.ImportFrom) and module.startswith("zaroz_sim.kube"):
                found |= ({f"{module}.{a.name}" for a in node.names} if module == "zaroz_sim.kube"
                          else {module})  # fmt: skip
        graph[f"zaroz_sim.kube.{path.stem}"] = found
    assert "zaroz_sim.kube.watch" in graph["zaroz_sim.kube.emulator"]

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, set()) - seen:
            if nxt == goal or reaches(nxt, goal, seen | {nxt}):
                return True
        return False

    assert [m for m in graph if reaches(m, m, set())] == []
