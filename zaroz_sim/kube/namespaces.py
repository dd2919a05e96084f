"""Core v1 namespaces, read only (get, list): `default` and every namespace that holds a
UnitSignal, so `kubectl get namespaces` shows where the units are, as on a real cluster. No
other core resource is served; discovery lists this one with exactly these verbs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import orjson
from aiohttp import web

from zaroz_sim.kube import table
from zaroz_sim.kube.store import KubeError, Obj

PREFIX = "/api/v1/namespaces"
RESOURCE: Obj = {"name": "namespaces", "singularName": "namespace", "namespaced": False,
                 "kind": "Namespace", "verbs": ["get", "list"], "shortNames": ["ns"]}  # fmt: skip
_COLUMNS = [table.columns_of({})[0],
            {"name": "Status", "type": "string", "format": "", "priority": 0, "jsonPath":
             ".status.phase", "description": "The status of the namespace"},
            {"name": "Age", "type": "date", "format": "", "priority": 0, "jsonPath":
             ".metadata.creationTimestamp", "description": "CreationTimestamp is a timestamp "
             "representing the server time when this object was created."}]  # fmt: skip


def namespace(name: str, created: str, rv: int) -> Obj:
    uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.namespaces.zaroz-sim"))
    return {"kind": "Namespace", "apiVersion": "v1",
            "metadata": {"name": name, "uid": uid, "resourceVersion": str(rv),
                         "creationTimestamp": created,
                         "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}  # fmt: skip


def serve(request: web.Request, objects: Iterable[Obj], started: str, rv: int,
          now_s: float) -> web.Response:  # fmt: skip
    """GET of /api/v1/namespaces[/<name>] (a Table when asked)."""
    created: dict[str, str] = {"default": started}
    for obj in objects:
        meta = obj["metadata"]
        stamp = meta.get("creationTimestamp", started)
        created[meta["namespace"]] = min(created.get(meta["namespace"], stamp), stamp)
    items = [namespace(n, created[n], rv) for n in sorted(created)]
    name = request.path.rstrip("/")[len(PREFIX):].lstrip("/") or None
    if name is not None:
        items = [i for i in items if i["metadata"]["name"] == name]
        if "/" in name or not items:
            details = {"name": name, "kind": "namespaces"}
            raise KubeError(404, "NotFound", f'namespaces "{name}" not found', details)
    body: Obj
    if table.wants_table(request.headers.get("Accept", "")) is not None:
        body = table.table(items, _COLUMNS, now_s, meta={"resourceVersion": str(rv)})
    elif name is not None:
        body = items[0]
    else:
        body = {"kind": "NamespaceList", "apiVersion": "v1",
                "metadata": {"resourceVersion": str(rv)}, "items": items}  # fmt: skip
    return web.Response(body=orjson.dumps(body), content_type="application/json")
