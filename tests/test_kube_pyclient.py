"""The official `kubernetes` Python client against the emulator, through a kubeconfig file: a
paginated list (limit/continue, one resourceVersion, remainingItemCount), the 410 for an expired
continue token and its -1 continuation, watch.Watch().stream() with bookmarks and a 410, writes
(merge patch of status with a null, a refused create), discovery and the CRD."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from kubernetes import client, config, watch

from zaroz_sim.kube.emulator import KubeEmulator, decode_continue

GROUP, VERSION, PLURAL = "units.zaroz.cloud", "v1", "unitsignals"
TOKEN = "pyclient-token"


def spec(i: int) -> dict[str, Any]:
    return {"unitId": f"unit-{i}", "key": f"k{i}", "contractVersion": 1, "generation": 1}


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    e = KubeEmulator(token=TOKEN, seed=5, bookmark_interval_s=0.2)
    for i in range(11):
        e.create(f"ns-{i % 2}", f"u{i:02d}", spec(i), status={"seq": i, "accepting": True,
                                                           "observedGeneration": 1,
                                                           "agentVersion": "1"})
    await e.start()
    yield e
    await e.stop()


@pytest.fixture
def api(emu: KubeEmulator, tmp_path: Path) -> client.ApiClient:
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "emu",
                  "clusters": [{"name": "emu", "cluster": {"server": emu.url}}],
                  "users": [{"name": "emu", "user": {"token": TOKEN}}],
                  "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "emu"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    return config.new_client_from_config(str(path))


async def test_paginated_list_is_one_snapshot(emu: KubeEmulator, api: client.ApiClient) -> None:
    objects = client.CustomObjectsApi(api)
    expected = [k.split("/")[1] for k in sorted(emu.store.objects)]

    def pages() -> list[dict[str, Any]]:
        out, token = [], None
        while True:
            page = objects.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=4,
                                                      **({"_continue": token} if token else {}))
            out.append(page)
            emu.patch_status("ns-0", "u00", {"seq": 100 + len(out)})  # the list must not see it
            token = page["metadata"].get("continue")
            if not token:
                return out

    got = await asyncio.to_thread(pages)
    assert [o["metadata"]["name"] for p in got for o in p["items"]] == expected
    assert len({p["metadata"]["resourceVersion"] for p in got}) == 1
    assert [p["metadata"].get("remainingItemCount") for p in got] == [7, 3, None]
    assert got[0]["items"][0]["status"]["seq"] == 0


async def test_an_expired_continue_is_410_with_a_minus_one_continuation(
    emu: KubeEmulator, api: client.ApiClient
) -> None:
    objects = client.CustomObjectsApi(api)
    first = await asyncio.to_thread(objects.list_namespaced_custom_object, GROUP, VERSION,
                                    "ns-1", PLURAL, limit=2)
    emu.patch_status("ns-0", "u00", {"seq": 99})
    emu.compact()  # etcd compacted past the list's revision
    with pytest.raises(client.ApiException) as err:
        await asyncio.to_thread(objects.list_namespaced_custom_object, GROUP, VERSION, "ns-1",
                                PLURAL, limit=2, _continue=first["metadata"]["continue"])
    assert err.value.status == 410
    body = orjson.loads(err.value.body)
    assert body["reason"] == "Expired"
    fresh = body["metadata"]["continue"]
    assert decode_continue(fresh) == (-1, "u03\x00")
    rest = await asyncio.to_thread(objects.list_namespaced_custom_object, GROUP, VERSION, "ns-1",
                                   PLURAL, _continue=fresh)
    assert [o["metadata"]["name"] for o in rest["items"]] == ["u05", "u07", "u09"]


async def test_watch_stream_with_bookmarks_and_events(
    emu: KubeEmulator, api: client.ApiClient
) -> None:
    objects = client.CustomObjectsApi(api)
    rv = emu.resource_version
    seen: list[tuple[str, str]] = []
    ready = threading.Event()

    def stream() -> None:
        w = watch.Watch()
        for event in w.stream(objects.list_namespaced_custom_object, GROUP, VERSION, "ns-0",
                              PLURAL, resource_version=str(rv), allow_watch_bookmarks=True,
                              timeout_seconds=20):
            obj = event["object"] if event["type"] != "BOOKMARK" else event["raw_object"]
            seen.append((event["type"], obj["metadata"]["resourceVersion"]))
            ready.set()
            types = {t for t, _ in seen}
            if {"BOOKMARK", "MODIFIED", "DELETED"} <= types:
                w.stop()

    task = asyncio.create_task(asyncio.to_thread(stream))
    await asyncio.to_thread(ready.wait, 20)  # a bookmark came first: nothing was written
    emu.patch_status("ns-0", "u02", {"seq": 50})
    emu.delete("ns-0", "u04")
    await asyncio.wait_for(task, 30)
    assert seen[0] == ("BOOKMARK", str(rv))
    changes = [s for s in seen if s[0] != "BOOKMARK"]
    assert changes == [("MODIFIED", str(rv + 1)), ("DELETED", str(rv + 2))]


async def test_watch_from_an_expired_version_raises_410(
    emu: KubeEmulator, api: client.ApiClient
) -> None:
    objects = client.CustomObjectsApi(api)
    old = emu.resource_version
    emu.patch_status("ns-0", "u00", {"seq": 9})
    emu.compact()

    def stream() -> None:
        for _ in watch.Watch().stream(objects.list_cluster_custom_object, GROUP, VERSION, PLURAL,
                                      resource_version=str(old), timeout_seconds=5):
            pass

    with pytest.raises(client.ApiException) as err:
        await asyncio.to_thread(stream)
    assert err.value.status == 410


async def test_status_merge_patch_and_a_refused_create(
    emu: KubeEmulator, api: client.ApiClient
) -> None:
    objects = client.CustomObjectsApi(api)
    def patch(status: dict[str, Any]) -> Any:
        return objects.patch_namespaced_custom_object_status(GROUP, VERSION, "ns-0", PLURAL,
                                                             "u00", {"status": status})

    patched = await asyncio.to_thread(patch, {"activity": "idle", "allocationAck": "a1"})
    assert patched["status"]["activity"] == "idle"
    patched = await asyncio.to_thread(patch, {"activity": None, "seq": 3})
    assert "activity" not in patched["status"] and patched["status"]["allocationAck"] == "a1"
    assert emu.get("ns-0", "u00")["status"] == patched["status"]
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "UnitSignal", "metadata": {"name": "x"},
            "spec": spec(1) | {"key": "Not A Valid Key"}}
    with pytest.raises(client.ApiException) as err:
        await asyncio.to_thread(objects.create_namespaced_custom_object, GROUP, VERSION, "ns-0",
                                PLURAL, body)
    assert err.value.status == 422
    causes = orjson.loads(err.value.body)["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec.key"]


async def test_discovery_and_the_crd(emu: KubeEmulator, api: client.ApiClient) -> None:
    groups = await asyncio.to_thread(client.ApisApi(api).get_api_versions)
    assert {g.name for g in groups.groups} == {GROUP, "apiextensions.k8s.io"}
    version = await asyncio.to_thread(client.VersionApi(api).get_code)
    assert (version.major, version.minor) == ("1", "32")
    crds = client.ApiextensionsV1Api(api)
    crd = await asyncio.to_thread(crds.read_custom_resource_definition,
                                  f"{PLURAL}.{GROUP}")  # fmt: skip
    assert crd.spec.names.kind == "UnitSignal"
    assert {c.type: c.status for c in crd.status.conditions}["Established"] == "True"
    emu.uninstall_crd()
    with pytest.raises(client.ApiException) as err:
        await asyncio.to_thread(crds.read_custom_resource_definition, f"{PLURAL}.{GROUP}")
    assert err.value.status == 404
    groups = await asyncio.to_thread(client.ApisApi(api).get_api_versions)
    assert {g.name for g in groups.groups} == {"apiextensions.k8s.io"}


async def test_namespaces_are_listed_read_only(emu: KubeEmulator, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    listed = await asyncio.to_thread(core.list_namespace)
    assert [n.metadata.name for n in listed.items] == ["default", "ns-0", "ns-1"]
    assert listed.items[1].status.phase == "Active"
    with pytest.raises(client.ApiException) as err:
        await asyncio.to_thread(core.delete_namespace, "ns-0")
    assert err.value.status == 405
