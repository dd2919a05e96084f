"""API discovery as kube-apiserver 1.32 serves it: /version, /api, /apis, a group, a version.

Two forms, chosen by the Accept header as the server does: aggregated discovery
(apidiscovery.k8s.io/v2 APIGroupDiscoveryList, one document with every group, version and
resource: what kubectl 1.32 and client-go ask for first) and the legacy APIVersions,
APIGroupList, APIGroup and APIResourceList (what older clients and the Python client read).
The verbs listed are exactly those the emulator serves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from zaroz_sim.kube import openapi
from zaroz_sim.kube.namespaces import RESOURCE as NAMESPACES
from zaroz_sim.kube.store import KubeError, Obj

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_AGGREGATED_BETA = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
CRD_GROUP, CRD_VERSION, CRD_PLURAL = "apiextensions.k8s.io", "v1", "customresourcedefinitions"
# The verbs each resource really has here (a CRD's objects: all; the CRD itself: read only).
OBJECT_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]
CRD_VERBS = ["get", "list", "watch"]
VERSION_INFO = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-zaroz-sim",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.23.4", "compiler": "gc", "platform": "linux/amd64"}  # fmt: skip


def wants_aggregated(accept: str) -> str | None:
    """The aggregated form's media type if the client accepts it (v2 first), else None."""
    kinds = [part.strip().replace(" ", "") for part in accept.split(",")]
    for kind in (AGGREGATED, _AGGREGATED_BETA):
        if any(k.split(";q=")[0] == kind for k in kinds):
            return kind
    return None


def _names(crd: Mapping[str, Any]) -> Mapping[str, Any]:
    names: Mapping[str, Any] = crd["spec"]["names"]
    return names


def _served(crd: Mapping[str, Any]) -> list[str]:
    return [v["name"] for v in crd["spec"]["versions"] if v.get("served")]


def _has_status(crd: Mapping[str, Any], version: str) -> bool:
    return any(v["name"] == version and "status" in (v.get("subresources") or {})
               for v in crd["spec"]["versions"])  # fmt: skip


def _resources(crd: Mapping[str, Any] | None) -> dict[tuple[str, str], list[Obj]]:
    """(group, version) -> APIResource entries (the legacy form)."""
    out: dict[tuple[str, str], list[Obj]] = {(CRD_GROUP, CRD_VERSION): [{
        "name": CRD_PLURAL, "singularName": "customresourcedefinition", "namespaced": False,
        "kind": "CustomResourceDefinition", "verbs": CRD_VERBS, "shortNames": ["crd", "crds"],
        "categories": ["api-extensions"]}]}  # fmt: skip
    if crd is None:
        return out
    names, group = _names(crd), crd["spec"]["group"]
    namespaced = crd["spec"]["scope"] == "Namespaced"
    for version in _served(crd):
        main: Obj = {"name": names["plural"], "singularName": names.get("singular", ""),
                     "namespaced": namespaced, "kind": names["kind"], "verbs": OBJECT_VERBS}
        for extra in ("shortNames", "categories"):
            if names.get(extra):
                main[extra] = names[extra]
        entries = [main]
        if _has_status(crd, version):
            entries.append({"name": f"{names['plural']}/status", "singularName": "",
                            "namespaced": namespaced, "kind": names["kind"],
                            "verbs": STATUS_VERBS})  # fmt: skip
        out[(group, version)] = entries
    return out


def api_versions(address: str) -> Obj:
    """/api: the core group's versions (v1 serves namespaces only, read only)."""
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                            "serverAddress": address}]}  # fmt: skip


def core_resources() -> Obj:
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": [NAMESPACES]}


def _group(group: str, versions: list[str]) -> Obj:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": listed, "preferredVersion": listed[0]}


def _groups(crd: Mapping[str, Any] | None) -> list[Obj]:
    groups = [_group(CRD_GROUP, [CRD_VERSION])]
    if crd is not None:
        groups.append(_group(crd["spec"]["group"], _served(crd)))
    return groups


def api_group_list(crd: Mapping[str, Any] | None) -> Obj:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": _groups(crd)}


def api_group(crd: Mapping[str, Any] | None, group: str) -> Obj | None:
    found = next((g for g in _groups(crd) if g["name"] == group), None)
    return None if found is None else {"kind": "APIGroup", "apiVersion": "v1"} | found


def resource_list(crd: Mapping[str, Any] | None, group: str, version: str) -> Obj | None:
    entries = _resources(crd).get((group, version))
    if entries is None:
        return None
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
            "resources": entries}  # fmt: skip


def aggregated(crd: Mapping[str, Any] | None, *, core: bool, media: str = AGGREGATED) -> Obj:
    """APIGroupDiscoveryList: /api (core: the empty core group) or /apis (every group)."""
    api_version = "apidiscovery.k8s.io/" + ("v2beta1" if "v2beta1" in media else "v2")
    items: list[Obj] = []
    if core:
        resources = [_aggregated_resource("", "v1", [NAMESPACES])]
        items.append({"metadata": {"creationTimestamp": None}, "versions": [
            {"version": "v1", "resources": resources, "freshness": "Current"}]})
    else:
        by_group: dict[str, list[Obj]] = {}
        for (group, version), entries in _resources(crd).items():
            by_group.setdefault(group, []).append({"version": version, "resources": [
                _aggregated_resource(group, version, entries)], "freshness": "Current"})
        items = [{"metadata": {"name": group, "creationTimestamp": None}, "versions": versions}
                 for group, versions in by_group.items()]  # fmt: skip
    return {"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {},
            "items": items}  # fmt: skip


def _aggregated_resource(group: str, version: str, entries: list[Obj]) -> Obj:
    main, subs = entries[0], entries[1:]
    kind = {"group": group, "version": version, "kind": main["kind"]}
    out: Obj = {"resource": main["name"], "responseKind": kind,
                "scope": "Namespaced" if main["namespaced"] else "Cluster",
                "singularResource": main["singularName"], "verbs": main["verbs"]}  # fmt: skip
    for extra in ("shortNames", "categories"):
        if main.get(extra):
            out[extra] = main[extra]
    if subs:
        out["subresources"] = [{"subresource": s["name"].split("/", 1)[1], "responseKind": kind,
                                "verbs": s["verbs"]} for s in subs]  # fmt: skip
    return out


def serve(request: web.Request, crd: Mapping[str, Any] | None) -> web.Response:
    """GET of /version, /api, /api/v1, /apis, /apis/<group>[/<version>], /openapi/v3[/<path>]
    (/openapi/v2 is a 404, which kubectl accepts); `crd` is None while it is not installed."""
    path = request.path.rstrip("/")
    media = wants_aggregated(request.headers.get("Accept", ""))
    body: Obj | None = None
    if path == "/version":
        body = VERSION_INFO
    elif path in ("/api", "/apis"):
        if media is not None:
            doc = aggregated(crd, core=path == "/api", media=media)
            return web.Response(body=orjson.dumps(doc), headers={"Content-Type": media})
        body = api_versions(request.host) if path == "/api" else api_group_list(crd)
    elif path == "/api/v1":
        body = core_resources()
    elif path.startswith("/openapi/"):
        docs = openapi.documents(crd)
        if path == "/openapi/v3":
            body = openapi.index(docs)
        elif path.removeprefix("/openapi/v3/") in docs:
            return web.Response(body=docs[path.removeprefix("/openapi/v3/")],
                                content_type="application/json")
    else:
        parts = path.split("/")[2:]  # /apis/<group>[/<version>]
        if len(parts) == 1:
            body = api_group(crd, parts[0])
        elif len(parts) == 2:
            body = resource_list(crd, parts[0], parts[1])
    if body is None:
        raise KubeError(404, "NotFound", "the server could not find the requested resource")
    return web.Response(body=orjson.dumps(body), content_type="application/json")
