"""The CustomResourceDefinition itself, as apiextensions.k8s.io/v1 shows it: get, list, watch.

Installed, it is the deploy/ manifest with the server's metadata and an Established status;
deleted, it is gone (404) and its watchers see DELETED. It takes the store's current revision
without writing one, so the UnitSignal resourceVersions stay gapless for their watchers.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from zaroz_sim.kube import table
from zaroz_sim.kube.discovery import CRD_GROUP, CRD_PLURAL, CRD_VERSION
from zaroz_sim.kube.params import bool_param, int_param
from zaroz_sim.kube.store import KubeError, Obj, rfc3339_s

CRD_API_VERSION = "apiextensions.k8s.io/v1"


class CrdRecord:
    """The CRD object (None while not installed) and the queues of its open watches."""

    def __init__(self, manifest: Mapping[str, Any], rng: random.Random) -> None:
        self.manifest = manifest
        self.rng = rng
        self.obj: Obj | None = None
        self.watches: set[asyncio.Queue[tuple[str, Obj] | None]] = set()

    @property
    def name(self) -> str:
        name: str = self.manifest["metadata"]["name"]
        return name

    def install(self, rv: int, now_ns: int) -> None:
        now = rfc3339_s(now_ns)
        obj: Obj = orjson.loads(orjson.dumps(self.manifest))
        obj["metadata"] = {"name": self.name,
                           "uid": str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
                           "resourceVersion": str(rv), "generation": 1,
                           "creationTimestamp": now}  # fmt: skip
        names = obj["spec"]["names"]
        conditions = [{"type": t, "status": "True", "lastTransitionTime": now, "reason": r,
                       "message": m} for t, r, m in (
            ("NamesAccepted", "NoConflicts", "no conflicts found"),
            ("Established", "InitialNamesAccepted", "the initial names have been accepted"))]
        obj["status"] = {"acceptedNames": names, "conditions": conditions,
                         "storedVersions": [v["name"] for v in obj["spec"]["versions"]
                                            if v.get("storage")]}  # fmt: skip
        self.obj = obj
        self._tell("ADDED", obj)

    def uninstall(self, rv: int) -> None:
        if self.obj is None:
            return
        gone = self.obj | {"metadata": self.obj["metadata"] | {"resourceVersion": str(rv)}}
        self.obj = None
        self._tell("DELETED", gone)

    def stop(self) -> None:
        for queue in list(self.watches):
            queue.put_nowait(None)

    def _tell(self, type_: str, obj: Obj) -> None:
        for queue in list(self.watches):
            queue.put_nowait((type_, obj))

    # -- reads -----------------------------------------------------------------------------------

    def get(self, name: str) -> Obj:
        if self.obj is None or name != self.name:
            details = {"name": name, "group": "apiextensions.k8s.io",
                       "kind": "customresourcedefinitions"}  # fmt: skip
            raise KubeError(404, "NotFound", f'customresourcedefinitions.apiextensions.k8s.io '
                            f'"{name}" not found', details)
        return self.obj

    def list(self, rv: int) -> Obj:
        return {"kind": "CustomResourceDefinitionList", "apiVersion": CRD_API_VERSION,
                "metadata": {"resourceVersion": str(rv)},
                "items": [] if self.obj is None else [self.obj]}  # fmt: skip

    async def serve(self, request: web.Request, rv: int, timeout_range: tuple[float, float],
                    now_s: float) -> web.StreamResponse:  # fmt: skip
        """GET of .../customresourcedefinitions[/<name>]: get, list (as a Table if asked, with
        kube's NAME and CREATED AT), watch."""
        rest = request.path.rstrip("/")[len(f"/apis/{CRD_GROUP}/{CRD_VERSION}/{CRD_PLURAL}"):]
        name = rest.lstrip("/") or None
        if name is not None and "/" in name:
            raise KubeError(404, "NotFound", "the server could not find the requested resource")
        if bool_param(request.query, "watch"):
            return await self.serve_watch(request, rv, name, timeout_range)
        body = self.get(name) if name is not None else self.list(rv)
        if table.wants_table(request.headers.get("Accept", "")) is not None:
            objects = [body] if name is not None else body["items"]
            columns = [table.columns_of({})[0], {"name": "Created At", "type": "date",
                       "format": "", "priority": 0, "description": "",
                       "jsonPath": ".metadata.creationTimestamp"}]  # fmt: skip
            body = table.table(objects, columns, now_s, meta={"resourceVersion": str(rv)})
            for row, obj in zip(body["rows"], objects, strict=True):
                row["cells"][1] = obj["metadata"]["creationTimestamp"]  # a time, not an age
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def serve_watch(self, request: web.Request, rv: int, name: str | None,
                          timeout_range: tuple[float, float]) -> web.StreamResponse:  # fmt: skip
        """Live events (the current object first unless a resourceVersion is given), bookmarks
        every 10 s when asked, until timeoutSeconds (or kube's 30-60 min) or the server stops."""
        query = request.query
        timeout = int_param(query, "timeoutSeconds")
        bookmarks = bool_param(query, "allowWatchBookmarks") is True
        queue: asyncio.Queue[tuple[str, Obj] | None] = asyncio.Queue()
        self.watches.add(queue)
        if query.get("resourceVersion", "") in ("", "0") and self.obj is not None:
            queue.put_nowait(("ADDED", self.obj))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout if timeout and timeout > 0
                                  else self.rng.uniform(*timeout_range))  # fmt: skip
        try:
            await response.prepare(request)
            while (now := loop.time()) < deadline:
                try:
                    item = await asyncio.wait_for(queue.get(), min(deadline - now, 10.0))
                except TimeoutError:
                    if bookmarks:
                        mark = {"kind": "CustomResourceDefinition", "apiVersion": CRD_API_VERSION,
                                "metadata": {"resourceVersion": str(rv)}}  # fmt: skip
                        await response.write(orjson.dumps({"type": "BOOKMARK", "object": mark})
                                             + b"\n")  # fmt: skip
                    continue
                if item is None:
                    break
                type_, obj = item
                if name is None or obj["metadata"]["name"] == name:
                    rv = max(rv, int(obj["metadata"]["resourceVersion"]))
                    await response.write(orjson.dumps({"type": type_, "object": obj}) + b"\n")
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        finally:
            self.watches.discard(queue)
        return response
