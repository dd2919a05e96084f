"""The Kubernetes emulator's object store and LIST/GET behave like kube-apiserver for a CRD."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.jsonclient import JsonClient
from zaroz_sim.kube.emulator import KubeEmulator, KubeError, decode_continue, encode_continue
from zaroz_sim.kube.select import SelectorError, merge_patch, parse_label_selector

API = "/apis/units.zaroz.cloud/v1"
ALL = f"{API}/unitsignals"
TOKEN = "kube-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
T0 = 1_700_000_000 * 1_000_000_000
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def spec(i: int, generation: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "unitId": f"u-{i}",
        "key": f"k{i}",
        "contractVersion": 1,
        "generation": generation,
        **extra,
    }


class Clock:
    """Controllable ns clock for creationTimestamp and managedFields times."""

    def __init__(self) -> None:
        self.now = T0 + 400_000_000  # sub-second part must not show

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1e9)


class Client(JsonClient):
    """Fresh connection per request (force_close) so dropped ones are not silently retried."""

    def __init__(self, base: str, session: aiohttp.ClientSession) -> None:
        super().__init__(base, session, AUTH)

    async def list_all(self, path: str = ALL, **params: Any) -> tuple[list[dict[str, Any]], str]:
        """Follow continue tokens; every page must report the same resourceVersion."""
        items: list[dict[str, Any]] = []
        rvs: set[str] = set()
        token = None
        while True:
            query = dict(params) | ({"continue": token} if token else {})
            status, body, _ = await self.get(path, **query)
            assert status == 200, body
            items += body["items"]
            rvs.add(body["metadata"]["resourceVersion"])
            token = body["metadata"].get("continue")
            if not token:
                assert len(rvs) == 1
                return items, rvs.pop()


@pytest.fixture
async def kube() -> AsyncIterator[tuple[KubeEmulator, Client]]:
    emu = KubeEmulator(token=TOKEN, clock=Clock(), seed=3, history=50, too_large_wait_s=0.1)
    base = await emu.start()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        yield emu, Client(base, session)
    await emu.stop()


def names(items: list[dict[str, Any]]) -> list[str]:
    return [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in items]


# -- store semantics ---------------------------------------------------------------------------


def test_generation_resource_version_and_managed_fields() -> None:
    clock = Clock()
    emu = KubeEmulator(clock=clock, start_rv=100, seed=1)
    obj = emu.create("ns", "a", spec(1), labels={"units.zaroz.cloud/workload": "wl"})
    meta = obj["metadata"]
    assert (obj["apiVersion"], obj["kind"]) == ("units.zaroz.cloud/v1", "UnitSignal")
    assert meta["resourceVersion"] == "101" and meta["generation"] == 1
    assert meta["creationTimestamp"] == "2023-11-14T22:13:20Z" and "deletionTimestamp" not in meta
    assert "status" not in obj
    [entry] = meta["managedFields"]
    assert entry == {
        "manager": "kernel",
        "operation": "Update",
        "apiVersion": "units.zaroz.cloud/v1",
        "time": "2023-11-14T22:13:20Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {".": {}, "f:units.zaroz.cloud/workload": {}}},
            "f:spec": {
                ".": {},
                "f:unitId": {},
                "f:key": {},
                "f:contractVersion": {},
                "f:generation": {},
            },
        },
    }

    clock.advance(5)
    same = emu.update_spec("ns", "a", spec(1))  # identical: a no-op, not even a new rv
    assert same["metadata"]["resourceVersion"] == "101" and emu.resource_version == 101
    obj = emu.update_spec("ns", "a", spec(1, generation=2))
    assert obj["metadata"]["generation"] == 2 and obj["metadata"]["resourceVersion"] == "102"
    assert obj["metadata"]["managedFields"][0]["time"] == "2023-11-14T22:13:25Z"

    clock.advance(2)
    obj = emu.patch_status(
        "ns", "a", {"observedGeneration": 2, "seq": 1, "activity": "idle", "allocationAck": None}
    )
    assert obj["metadata"]["generation"] == 2 and obj["metadata"]["resourceVersion"] == "103"
    assert obj["status"] == {"observedGeneration": 2, "seq": 1, "activity": "idle"}
    agent = obj["metadata"]["managedFields"][1]
    assert agent["manager"] == "zaroz-agent" and agent["subresource"] == "status"
    assert agent["time"] == "2023-11-14T22:13:27Z" and agent["operation"] == "Update"
    assert agent["fieldsV1"]["f:status"]["f:seq"] == {}
    assert obj["metadata"]["managedFields"][0]["time"] == "2023-11-14T22:13:25Z"

    obj = emu.patch_status("ns", "a", {"seq": 1})  # no change: no write
    assert obj["metadata"]["resourceVersion"] == "103"
    obj = emu.patch_status("ns", "a", {"activity": None, "seq": 2})  # null deletes the key
    assert obj["status"] == {"observedGeneration": 2, "seq": 2}
    assert obj["metadata"]["resourceVersion"] == "104" and obj["metadata"]["generation"] == 2

    obj = emu.set_labels("ns", "a", {"units.zaroz.cloud/workload": "other"})
    assert obj["metadata"]["generation"] == 2 and obj["metadata"]["resourceVersion"] == "105"
    assert obj["metadata"]["creationTimestamp"] == "2023-11-14T22:13:20Z"
    assert list(obj["metadata"]).index("labels") < list(obj["metadata"]).index("managedFields")
    gone = emu.delete("ns", "a")
    assert gone["metadata"]["resourceVersion"] == "106" and gone["status"]["seq"] == 2
    with pytest.raises(KubeError) as err:
        emu.get("ns", "a")
    assert err.value.code == 404


def test_create_with_status_is_two_writes_and_conflict() -> None:
    emu = KubeEmulator(start_rv=10)
    obj = emu.create("ns", "a", spec(1), status={"seq": 0, "accepting": False})
    assert obj["metadata"]["resourceVersion"] == "12" and obj["status"]["seq"] == 0
    assert [e.type for e in emu.store.history] == ["ADDED", "MODIFIED"]
    with pytest.raises(KubeError) as err:
        emu.create("ns", "a", spec(1))
    assert err.value.code == 409 and err.value.reason == "AlreadyExists"
    returned = emu.get("ns", "a")
    returned["spec"]["key"] = "mutated"  # callers get copies
    assert emu.get("ns", "a")["spec"]["key"] == "k1"


def test_merge_patch_rfc7386() -> None:
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {
        "a": {"c": 2, "d": 3}
    }
    assert merge_patch({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}
    assert merge_patch(None, {"a": {"b": None}}) == {"a": {}}
    assert merge_patch({"a": 1}, ["x"]) == ["x"]


# -- HTTP: get, errors ---------------------------------------------------------------------------


async def test_get_auth_and_not_found(kube: tuple[KubeEmulator, Client]) -> None:
    emu, client = kube
    emu.create("ns", "a", spec(1), status={"seq": 3})
    status, body, _ = await client.get(f"{API}/namespaces/ns/unitsignals/a")
    assert status == 200 and body["status"]["seq"] == 3 and body["kind"] == "UnitSignal"
    status, body, _ = await client.get(f"{API}/namespaces/ns/unitsignals/a/status")
    assert status == 200 and body["metadata"]["name"] == "a"
    status, body, _ = await client.get(f"{API}/namespaces/ns/unitsignals/zz")
    assert status == 404
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'unitsignals.units.zaroz.cloud "zz" not found',
        "reason": "NotFound",
        "details": {"name": "zz", "group": "units.zaroz.cloud", "kind": "unitsignals"},
        "code": 404,
    }
    for path in ("/api/v1/pods", f"{API}/unitsignals/a", f"{API}/namespaces/ns/others"):
        status, body, _ = await client.get(path)
        assert status == 404 and body["kind"] == "Status" and body["reason"] == "NotFound"
    status, body, _ = await client.get(ALL, headers={"Authorization": "Bearer nope"})
    assert status == 401 and body["reason"] == "Unauthorized" and body["code"] == 401
    status, body, _ = await client.get(API)
    assert status == 200 and body["resources"][0]["name"] == "unitsignals"
    assert emu.requests["get"] == 3 and emu.requests["list"] == 1 and emu.requests["other"] == 3


# -- HTTP: list --------------------------------------------------------------------------------


async def test_list_shape_and_pagination_is_a_consistent_snapshot(
    kube: tuple[KubeEmulator, Client],
) -> None:
    emu, client = kube
    for i in range(7):
        emu.create("ns-b" if i % 2 else "ns-a", f"u{i}", spec(i), status={"seq": i})
    status, body, _ = await client.get(ALL)
    assert status == 200 and set(body) == {"apiVersion", "kind", "metadata", "items"}
    assert body["kind"] == "UnitSignalList" and body["apiVersion"] == "units.zaroz.cloud/v1"
    assert body["metadata"] == {"resourceVersion": str(emu.resource_version)}
    expected = names(body["items"])
    assert expected == sorted(expected) and len(expected) == 7
    assert all(o["kind"] == "UnitSignal" for o in body["items"])

    status, page1, _ = await client.get(ALL, limit=3)
    meta = page1["metadata"]
    assert names(page1["items"]) == expected[:3] and meta["remainingItemCount"] == 4
    assert decode_continue(meta["continue"]) == (int(meta["resourceVersion"]), "ns-a/u4\x00")
    # writes between pages must not show: the rest comes from the first page's snapshot
    emu.delete("ns-b", "u5")
    emu.patch_status("ns-b", "u1", {"seq": 99})
    emu.create("ns-a", "u9", spec(9))
    status, page2, _ = await client.get(ALL, limit=3, **{"continue": meta["continue"]})
    assert status == 200 and page2["metadata"]["resourceVersion"] == meta["resourceVersion"]
    assert names(page2["items"]) == expected[3:6]
    assert page2["items"][1]["status"]["seq"] == 1
    status, page3, _ = await client.get(ALL, limit=3, **{"continue": page2["metadata"]["continue"]})
    assert names(page3["items"]) == expected[6:] and "continue" not in page3["metadata"]

    items, rv = await client.list_all(f"{API}/namespaces/ns-a/unitsignals", limit=2)
    assert names(items) == ["ns-a/u0", "ns-a/u2", "ns-a/u4", "ns-a/u6", "ns-a/u9"]
    assert rv == str(emu.resource_version)
    status, body, _ = await client.get(ALL, limit=3, resourceVersion=rv, **{"continue": "x"})
    assert status == 400 and body["reason"] == "BadRequest"
    status, body, _ = await client.get(ALL, **{"continue": "not-a-token"})
    assert status == 400 and "continue" in body["message"]


async def test_expired_continue_is_410(kube: tuple[KubeEmulator, Client]) -> None:
    emu, client = kube
    for i in range(6):
        emu.create("ns", f"u{i}", spec(i))
    status, page1, _ = await client.get(ALL, limit=2)
    token = page1["metadata"]["continue"]
    for n in range(60):  # push the list's rv out of the 50-event history
        emu.patch_status("ns", "u0", {"seq": n})
    status, body, _ = await client.get(ALL, limit=2, **{"continue": token})
    assert status == 410 and body["reason"] == "Expired" and body["code"] == 410
    assert body["kind"] == "Status" and body["status"] == "Failure"
    fresh = body["metadata"]["continue"]  # the inconsistent continuation kube offers: rv -1
    assert decode_continue(fresh) == (-1, "ns/u1\x00")
    status, body, _ = await client.get(ALL, limit=10, **{"continue": fresh})
    assert status == 200 and names(body["items"]) == [f"ns/u{i}" for i in range(2, 6)]

    emu.faults.expire_continue()
    status, page1, _ = await client.get(ALL, limit=2)
    assert status == 200  # a first page has no continue: the fault waits for one
    status, body, _ = await client.get(ALL, limit=2, **{"continue": page1["metadata"]["continue"]})
    assert status == 410 and body["reason"] == "Expired"
    assert emu.faults.applied == [("list", "expire_continue")]


async def test_list_resource_version_semantics(kube: tuple[KubeEmulator, Client]) -> None:
    emu, client = kube
    for i in range(4):
        emu.create("ns", f"u{i}", spec(i))
    old = emu.resource_version
    emu.delete("ns", "u3")
    status, body, _ = await client.get(ALL, resourceVersion=0, limit=1)  # cache ignores limit
    assert len(body["items"]) == 3 and "continue" not in body["metadata"]
    status, body, _ = await client.get(ALL, resourceVersion=old, resourceVersionMatch="Exact")
    assert status == 200 and len(body["items"]) == 4
    assert body["metadata"]["resourceVersion"] == str(old)
    newer = {"resourceVersion": old, "resourceVersionMatch": "NotOlderThan"}
    status, body, _ = await client.get(ALL, **newer)
    assert len(body["items"]) == 3
    assert body["metadata"]["resourceVersion"] == str(emu.resource_version)
    status, body, _ = await client.get(ALL, resourceVersion=old, limit=2)  # legacy: exact
    assert names(body["items"]) == ["ns/u0", "ns/u1"]
    assert body["metadata"]["remainingItemCount"] == 2
    status, body, _ = await client.get(ALL, resourceVersion=1, resourceVersionMatch="Exact")
    assert status == 200 and body["items"] == []
    emu.compact()
    status, body, _ = await client.get(ALL, resourceVersion=old, resourceVersionMatch="Exact")
    assert status == 410 and body["reason"] == "Expired"
    status, body, _ = await client.get(ALL, resourceVersion=emu.resource_version + 5)
    assert status == 504 and body["reason"] == "Timeout"
    assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    for params in (  # kube: ListOptions that fail validation are 422 Invalid, see below
        {"resourceVersion": "x"},
        {"labelSelector": "a in b"},
        {"fieldSelector": "spec.key=1"},
    ):
        status, body, _ = await client.get(ALL, **params)
        assert status == 400 and body["reason"] == "BadRequest", params
    for params in ({"resourceVersionMatch": "Exact"},
                   {"resourceVersion": 0, "resourceVersionMatch": "Exact"}):
        status, body, _ = await client.get(ALL, **params)
        assert status == 422 and body["details"]["kind"] == "ListOptions", params


async def test_bodies_are_the_objects_as_written_at_that_version(
    kube: tuple[KubeEmulator, Client],
) -> None:
    """LIST and GET bodies are joined from bytes cached at each write: they must equal a fresh
    dump of the objects, current ones or (from a snapshot) as they were, after every kind of
    write; a namespace page must stop at its last key ("a0/..." sorts right after "a/...")."""
    emu, client = kube
    for ns in ("a", "a0", "ab"):
        for i in range(3):
            emu.create(ns, f"u{i}", spec(i), labels={"team": "x"}, status={"seq": i})
    old_rv = emu.resource_version
    old = {k: orjson.loads(orjson.dumps(o)) for k, o in emu.store.items()}
    emu.update_spec("a", "u0", spec(0, generation=2))
    emu.patch_status("a", "u1", {"seq": 7})
    emu.set_labels("a", "u2", None)
    emu.delete("a0", "u0")
    emu.create("a", "u3", spec(3))

    async def raw(path: str, **params: Any) -> bytes:
        query = {k: str(v) for k, v in params.items()}
        async with client.session.get(client.base + path, params=query, headers=AUTH) as r:
            assert r.status == 200
            return await r.read()

    def body(rv: int, objs: list[dict[str, Any]], **meta: Any) -> bytes:
        meta = {"resourceVersion": str(rv), **meta}
        kind = "UnitSignalList"
        return orjson.dumps({"apiVersion": "units.zaroz.cloud/v1", "kind": kind, "metadata": meta,
                             "items": objs})  # fmt: skip

    now = [o for _, o in emu.store.items()]
    assert await raw(ALL) == body(emu.resource_version, now)
    assert await raw(f"{API}/namespaces/a/unitsignals/u0") == orjson.dumps(now[0])
    in_a = [o for k, o in sorted(old.items()) if k.startswith("a/")]
    exact = {"resourceVersion": old_rv, "resourceVersionMatch": "Exact"}
    assert await raw(f"{API}/namespaces/a/unitsignals", **exact) == body(old_rv, in_a)
    token = encode_continue(old_rv, "u1\x00")
    page = await raw(f"{API}/namespaces/a/unitsignals", limit=2, resourceVersion=old_rv)
    assert page == body(old_rv, in_a[:2], **{"continue": token, "remainingItemCount": 1})
    rest = await raw(f"{API}/namespaces/a/unitsignals", limit=2, **{"continue": token})
    assert rest == body(old_rv, in_a[2:])


SELECTOR_LABELS = {
    "a": {"units.zaroz.cloud/workload": "web", "tier": "1"},
    "b": {"units.zaroz.cloud/workload": "db", "tier": "2"},
    "c": {"units.zaroz.cloud/workload": "web"},
    "d": {},
}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("units.zaroz.cloud/workload=web", "ac"),
        ("units.zaroz.cloud/workload==web", "ac"),
        ("units.zaroz.cloud/workload!=web", "bd"),
        ("tier", "ab"),
        ("!tier", "cd"),
        ("units.zaroz.cloud/workload in (web, db)", "abc"),
        ("units.zaroz.cloud/workload notin (web)", "bd"),
        ("units.zaroz.cloud/workload=web,tier", "a"),
        ("units.zaroz.cloud/workload in (db,web),!tier", "c"),
        ("tier>1", "b"),
        ("tier<2", "a"),
        ("", "abcd"),
    ],
)
async def test_label_selectors(
    kube: tuple[KubeEmulator, Client], selector: str, expected: str
) -> None:
    emu, client = kube
    for name, labels in SELECTOR_LABELS.items():
        emu.create("ns", name, spec(1), labels=labels)
    items, _ = await client.list_all(labelSelector=selector, limit=1)
    assert [o["metadata"]["name"] for o in items] == list(expected)
    match = parse_label_selector(selector)
    assert [n for n, labels in SELECTOR_LABELS.items() if match(labels)] == list(expected)
    _, body, _ = await client.get(ALL, fieldSelector="metadata.name=b")
    assert [o["metadata"]["name"] for o in body["items"]] == ["b"]


@pytest.mark.parametrize("bad", ["a=b=c", "in (a)", "a in a,b", "!a=b", "a/b/c=d", "a=(b)"])
def test_bad_label_selectors(bad: str) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(bad)
