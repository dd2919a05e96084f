"""A Kubernetes API server emulator for `unitsignals.units.zaroz.cloud/v1`, on loopback.

It speaks the real wire protocol (LIST with limit/continue over a consistent snapshot, WATCH
from a resourceVersion with bookmarks, 410 Expired, timeoutSeconds, metav1.Status errors), so
the exporter's Kubernetes source can be tested against what kube-apiserver really does. The
object store lives in `kube_store`, selectors in `kube_select`, scripted faults in `kube_faults`.
"""

from __future__ import annotations

import asyncio
import functools
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from zaroz_sim.kube import discovery, namespaces, table
from zaroz_sim.kube.crds import CrdRecord
from zaroz_sim.kube.discovery import CRD_GROUP, CRD_PLURAL, CRD_VERSION
from zaroz_sim.kube.faults import KubeFault, KubeFaultKind, KubeFaults
from zaroz_sim.kube.lists import decode_continue, encode_continue, list_body
from zaroz_sim.kube.params import bad_request, bool_param, check_list_options
from zaroz_sim.kube.select import SelectorError, parse_field_selector, parse_label_selector
from zaroz_sim.kube.store import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    Event,
    KubeError,
    Obj,
    ObjectStore,
    rfc3339_s,
)
from zaroz_sim.kube.validate import StructuralSchema
from zaroz_sim.kube.watch import close_transport, serve_watch
from zaroz_sim.kube.writes import APPLY_PATCH, WriteOptions, Writer, manager_from_agent

__all__ = ["KubeEmulator", "KubeError", "KubeFaultKind", "KubeFaults", "KubeRequest",
           "decode_continue", "encode_continue"]  # fmt: skip

_PREFIX = f"/apis/{GROUP}/{VERSION}"
_PATH = re.compile(rf"{_PREFIX}(?:/namespaces/([^/]+))?/{PLURAL}(?:/([^/]+)(/status)?)?/?")
_WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
_REASONS = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
            504: "Timeout"}  # fmt: skip


_CRD_FILE = Path(__file__).resolve().parents[2] / "deploy" / "overlays" / "dev" / "crd.yaml"
_CRD_PACKAGED = Path(__file__).resolve().parent / "crd.yaml"  # where the wheel ships it


@functools.cache
def default_crd() -> Obj:
    """deploy/'s generated UnitSignal CRD (the one operators install), read once."""
    path = _CRD_PACKAGED if _CRD_PACKAGED.exists() else _CRD_FILE
    crd: Obj = yaml.safe_load(path.read_text(encoding="utf-8"))
    return crd


def served_version(crd: Mapping[str, Any]) -> Obj:
    version: Obj = next(v for v in crd["spec"]["versions"] if v["name"] == VERSION)
    return version


@dataclass(frozen=True)
class KubeRequest:
    """One request as seen by the emulator: kind is list, watch, get, discovery or other."""

    kind: str
    path: str
    query: dict[str, str]


def _json(status: int, body: Any, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), headers=headers,
                        content_type="application/json")  # fmt: skip


def _body(raw: bytes, content_type: str) -> Any:
    """A request body: JSON, or YAML (which kube also accepts); anything else is 415."""
    try:
        if content_type in ("application/yaml", "application/apply-patch+yaml"):
            return yaml.safe_load(raw)
        if content_type in ("application/json", "", "application/octet-stream"):
            return orjson.loads(raw)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise bad_request(f"the body of the request could not be decoded: {exc}") from None
    raise KubeError(415, "UnsupportedMediaType",
                    'the body of the request was in an unknown format - accepted media types '
                    'include: application/json, application/yaml')  # fmt: skip


def fault_status(fault: KubeFault) -> web.Response:
    reason = _REASONS.get(fault.status, "InternalError")
    message = ("Too many requests, please try again later." if fault.status == 429
               else f"simulated fault: HTTP {fault.status}")  # fmt: skip
    details: dict[str, Any] = {"causes": [{"message": "simulated fault"}]}
    headers = {}
    if fault.retry_after is not None:
        details["retryAfterSeconds"] = fault.retry_after
        headers["Retry-After"] = str(fault.retry_after)
    return _json(fault.status, KubeError(fault.status, reason, message, details).status(), headers)


class KubeEmulator:
    """UnitSignal objects (Python write API) served over the kube-apiserver HTTP protocol."""

    def __init__(
        self,
        *,
        token: str | None = None,
        history: int = 100_000,
        history_s: float = 300.0,
        history_clock: Callable[[], float] = time.monotonic,
        clock: Callable[[], int] = time.time_ns,
        start_rv: int = 1,
        seed: int | None = None,
        bookmark_interval_s: float = 60.0,
        watch_timeout_s: tuple[float, float] = (1800.0, 3600.0),
        too_large_wait_s: float = 3.0,
        rv0_ignores_limit: bool = True,
        faults: KubeFaults | None = None,
        spec_manager: str = "kernel",
        status_manager: str = "zaroz-agent",
        crd_installed: bool = True,
        crd: Mapping[str, Any] | None = None,
    ) -> None:
        """`history` bounds the events kept (memory), `history_s` is how long they are kept
        (resourceVersions and continue tokens stay valid that long); `watch_timeout_s` is the
        range a watch without timeoutSeconds lasts (kube: 30-60 minutes); `crd` defaults to
        deploy/'s, whose schema every write is validated against."""
        self.crd_installed = crd_installed  # False: the group/version is not served at all
        self.crd: Obj = orjson.loads(orjson.dumps(crd if crd is not None else default_crd()))
        self.store = ObjectStore(
            history=history, history_s=history_s, history_clock=history_clock, clock=clock,
            start_rv=start_rv, seed=seed, spec_manager=spec_manager,
            status_manager=status_manager,
        )  # fmt: skip
        served = served_version(self.crd)
        self.writer = Writer(self.store, StructuralSchema(served["schema"]["openAPIV3Schema"]),
                             random.Random(seed))  # fmt: skip
        self._columns = table.columns_of(served)
        self.crds = CrdRecord(self.crd, random.Random(seed))
        born = self.store.clock()
        self._started = rfc3339_s(born)  # the cluster's birth: `default`'s creation
        if crd_installed:
            self.crds.install(self.store.rv, born)
        self.token = token
        self.bookmark_interval_s = bookmark_interval_s
        self.watch_timeout_s = watch_timeout_s
        self.too_large_wait_s = too_large_wait_s
        self.rv0_ignores_limit = rv0_ignores_limit
        self.faults = faults or KubeFaults()
        self.requests: Counter[str] = Counter()
        self.request_log: list[KubeRequest] = []
        self.rng = random.Random(seed)
        self.watches: set[asyncio.Queue[Event | None]] = set()
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner: web.AppRunner | None = None
        self.url: str | None = None  # base URL once started

    # -- Python API (the simulated kernel and agent write here; the exporter only reads HTTP) ----

    def create(self, namespace: str, name: str, spec: Mapping[str, Any],
               labels: Mapping[str, str] | None = None,
               status: Mapping[str, Any] | None = None) -> Obj:  # fmt: skip
        self._served()
        return self.store.create(namespace, name, spec, labels, status)

    def update_spec(self, namespace: str, name: str, spec: Mapping[str, Any]) -> Obj:
        self._served()
        return self.store.update_spec(namespace, name, spec)

    def patch_status(self, namespace: str, name: str, merge_patch: Mapping[str, Any]) -> Obj:
        self._served()
        return self.store.patch_status(namespace, name, merge_patch)

    def set_labels(self, namespace: str, name: str, labels: Mapping[str, str] | None) -> Obj:
        self._served()
        return self.store.set_labels(namespace, name, labels)

    def delete(self, namespace: str, name: str) -> Obj:
        self._served()
        return self.store.delete(namespace, name)

    def get(self, namespace: str, name: str) -> Obj:
        return self.store.get(namespace, name)

    # The write path a real client has (validated against the CRD, 422/409 as KubeError): the
    # methods above write as the kernel and agent always did, trusted, as a store would.

    def create_object(self, namespace: str, obj: Mapping[str, Any], *,
                      manager: str | None = None) -> Obj:  # fmt: skip
        """POST: a whole UnitSignal (apiVersion, kind, metadata.name, spec); status dropped."""
        self._served()
        return self.writer.create(namespace, obj, WriteOptions(manager=manager))

    def update_object(
        self,
        namespace: str,
        name: str,
        obj: Mapping[str, Any],
        *,
        subresource: str | None = None,
        manager: str | None = None,
    ) -> Obj:
        """PUT of the object (or of its status): metadata.resourceVersion must be current."""
        self._served()
        return self.writer.update(namespace, name, obj, subresource=subresource,
                                  options=WriteOptions(manager=manager))  # fmt: skip

    def patch_object(
        self,
        namespace: str,
        name: str,
        patch: Any,
        patch_type: str = "merge",
        *,
        subresource: str | None = None,
        manager: str | None = None,
    ) -> Obj:
        """PATCH: "merge" (RFC 7386: null deletes), "json" (RFC 6902) or "apply" (needs a
        manager), on the object or its "status" subresource."""
        self._served()
        return self.writer.patch(namespace, name, patch, patch_type, subresource=subresource,
                                 options=WriteOptions(manager=manager))  # fmt: skip

    def delete_object(self, namespace: str, name: str) -> Obj:
        self._served()
        return self.writer.delete(namespace, name)

    def compact(self) -> None:
        self.store.compact()

    def _served(self) -> None:
        if not self.crd_installed:
            raise KubeError(404, "NotFound", "the server could not find the requested resource")

    # -- the CRD (what `kubectl apply/delete -f crd.yaml` does to the served resource) ----------

    def uninstall_crd(self) -> None:
        """DELETE of the CustomResourceDefinition: its finalizer deletes every object first (open
        watches see each DELETED), then the resource stops being served: open watches end and
        every request answers 404 until it is installed again."""
        for key, _ in self.store.items():
            ns, name = key.split("/", 1)
            self.store.delete(ns, name)
        self.crd_installed = False
        self.crds.uninstall(self.store.rv)
        for queue in list(self.watches):
            queue.put_nowait(None)

    def install_crd(self) -> None:
        """The CRD is created (again): served from now on, empty. Its watch cache starts at the
        current revision, so a watch resuming from before it gets 410 and relists."""
        if not self.crd_installed:
            self.crd_installed = True
            self.store.compact()
            self.crds.install(self.store.rv, self.store.clock())

    @property
    def resource_version(self) -> int:
        return self.store.rv

    def count(self, kind: str | None = None, query: Mapping[str, str] | None = None) -> int:
        """Requests of `kind` (any if None) whose query contains every item of `query`."""
        want = dict(query or {}).items()
        return sum(1 for r in self.request_log
                   if (kind is None or r.kind == kind) and want <= r.query.items())  # fmt: skip

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on host:port (0: any free port); returns the base URL."""
        self._runner = web.AppRunner(self.app, shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        self.url = f"http://{host}:{self._runner.addresses[0][1]}"
        return self.url

    async def stop(self) -> None:
        self.crds.stop()
        for queue in list(self.watches):
            queue.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- HTTP ------------------------------------------------------------------------------------

    def _classify(self, request: web.Request) -> tuple[str, str | None, str | None, str | None]:
        """(request kind, namespace, name, subresource): the kind is the verb kube would log
        (get, list, watch, create, update, patch, delete, deletecollection), or "discovery",
        "other" (no such resource: 404) or "method" (a resource that has no such verb: 405)."""
        if request.path.rstrip("/") == _PREFIX:
            return "discovery", None, None, None
        m = _PATH.fullmatch(request.path)
        if m is None or (m[1] is None and m[2] is not None):
            return "other", None, None, None
        ns, name, sub = m[1], m[2], ("status" if m[3] else None)
        method = request.method
        if method == "GET":
            if bool_param(request.query, "watch") and sub is None:
                return "watch", ns, name, sub
            return ("get" if name else "list"), ns, name, sub
        verb = {("POST", False): "create", ("PUT", True): "update", ("PATCH", True): "patch",
                ("DELETE", True): "delete", ("DELETE", False): "deletecollection",
                }.get((method, name is not None))  # fmt: skip
        if verb is None or ns is None or (sub is not None and verb == "delete"):
            return "method", ns, name, sub
        return verb, ns, name, sub

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        meta = self._meta_kind(request.path)
        if meta is not None:
            return await self._handle_meta(request, meta)
        kind, ns, name, sub = self._classify(request)
        refused = self._admit(request, kind)
        if refused is not None:
            return refused
        try:
            if kind == "other" or not self.crd_installed:
                raise KubeError(404, "NotFound", "the server could not find the requested resource")
            if kind == "method":
                raise KubeError(405, "MethodNotAllowed",
                                "the server does not allow this method on the requested resource"
                                f" ({request.method})")  # fmt: skip
            if kind == "discovery":
                return _json(200, self._discovery())
            if kind in _WRITES:
                assert ns is not None
                return await self._write_request(request, kind, ns, name, sub)
            if kind in ("list", "watch"):
                check_list_options(request.query, watch=kind == "watch")
            fault = self.faults.take(kind, has_continue=bool(request.query.get("continue")))
            if fault is not None:
                if fault.kind is KubeFaultKind.STATUS:
                    return fault_status(fault)
                if fault.kind is KubeFaultKind.DROP:
                    close_transport(request)
                    return web.Response(status=500)
                if fault.kind is KubeFaultKind.COMPACT:
                    self.store.compact()
            if kind == "watch":
                return await self._watch(request, ns, name, fault)
            if fault is not None and fault.kind is KubeFaultKind.SLOW:
                await asyncio.sleep(fault.delay_s)
            as_table = table.wants_table(request.headers.get("Accept", "")) is not None
            if kind == "get":
                assert ns is not None and name is not None
                body = self.store.get_raw(ns, name)
                if as_table:
                    body = orjson.dumps(self._table([self.store.get(ns, name)], request.query))
            else:
                body = await self._list(request.query, ns, fault, as_table=as_table)
            return await self._send_body(request, body, fault)
        except KubeError as err:
            return _json(err.code, err.status())

    async def _write_request(self, request: web.Request, kind: str, ns: str, name: str | None,
                             sub: str | None) -> web.Response:  # fmt: skip
        """POST, PUT, PATCH, DELETE: the body decoded by its content type, then `writer`."""
        query = request.query
        validation = query.get("fieldValidation", "Warn") or "Warn"
        if validation not in ("Strict", "Warn", "Ignore"):
            raise bad_request(f'fieldValidation: Unsupported value: "{validation}": supported '
                              'values: "Ignore", "Strict", "Warn"')  # fmt: skip
        dry = query.getall("dryRun", [])
        if any(d != "All" for d in dry):
            raise bad_request(f'dryRun: Unsupported value: "{dry[0]}": supported values: "All"')
        opts = WriteOptions(manager=query.get("fieldManager")
                            or manager_from_agent(request.headers.get("User-Agent", "")),
                            dry_run=bool(dry), field_validation=validation)  # fmt: skip
        raw = await request.read()
        ctype = request.content_type
        status = 200
        if kind == "patch":
            assert name is not None
            if query.get("fieldManager") is None and ctype == APPLY_PATCH:
                opts.manager = None  # apply needs it given
            obj = self.writer.patch(ns, name, raw, ctype, subresource=sub, options=opts)
            status = 201 if opts.created else 200
        elif kind in ("delete", "deletecollection"):
            options = _body(raw, ctype) if raw else {}
            if kind == "delete":
                assert name is not None
                obj = self.writer.delete(ns, name, options, dry_run=opts.dry_run)
            else:
                obj = await self._delete_collection(query, ns, opts.dry_run)
        else:
            body = _body(raw, ctype)
            if kind == "create":
                obj = self.writer.create(ns, body, opts)
                status = 201 if not opts.dry_run else 200
            else:
                assert name is not None
                obj = self.writer.update(ns, name, body, subresource=sub, options=opts)
        headers = {"Warning": ", ".join(f'299 - {orjson.dumps(w).decode()}'
                                        for w in opts.warnings)} if opts.warnings else None
        return _json(status, obj, headers)

    async def _delete_collection(self, query: Mapping[str, str], ns: str, dry_run: bool) -> Obj:
        """DELETE of the collection: every object the selectors match, in one answer."""
        try:
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(query.get("fieldSelector"))
        except SelectorError as exc:
            raise bad_request(str(exc)) from None
        view = self.store.current()
        chosen = [key for key in view.keys if key.startswith(f"{ns}/")
                  and labels(view.objects[key]["metadata"].get("labels", {}))
                  and fields(view.objects[key])]  # fmt: skip
        items = [self.writer.delete(ns, key.split("/", 1)[1], dry_run=dry_run) for key in chosen]
        return {"apiVersion": API_VERSION, "kind": f"{KIND}List",
                "metadata": {"resourceVersion": str(self.store.rv)}, "items": items}  # fmt: skip

    # -- discovery, OpenAPI, the CRD ------------------------------------------------------------

    @staticmethod
    def _meta_kind(path: str) -> str | None:
        """The request kind of a path that is not the UnitSignal resource (None: it is)."""
        path = path.rstrip("/") or "/"
        if path in ("/version", "/api", "/api/v1", "/apis") or path.startswith("/openapi/"):
            return "discovery"
        if path == namespaces.PREFIX or (path.startswith(namespaces.PREFIX + "/")
                                         and path.count("/") == 4):  # fmt: skip
            return "namespaces"
        if path.startswith(f"/apis/{CRD_GROUP}"):
            rest = path[len(f"/apis/{CRD_GROUP}"):]
            return "crd" if rest.startswith(f"/{CRD_VERSION}/{CRD_PLURAL}") else "discovery"
        parts = path.split("/")
        if len(parts) == 3 and parts[1] == "apis":  # /apis/<group>
            return "discovery"
        return None

    def _admit(self, request: web.Request, kind: str) -> web.Response | None:
        """Count and log the request; a 401 when a token is set and not the one sent."""
        self.requests[kind] += 1
        self.request_log.append(KubeRequest(kind, request.path, dict(request.query)))
        if self.token is not None and request.headers.get("Authorization") != (
            f"Bearer {self.token}"
        ):
            return _json(401, KubeError(401, "Unauthorized", "Unauthorized").status())
        return None

    async def _handle_meta(self, request: web.Request, kind: str) -> web.StreamResponse:
        refused = self._admit(request, kind)
        if refused is not None:
            return refused
        try:
            if request.method != "GET":
                raise KubeError(405, "MethodNotAllowed",
                                "the server does not allow this method on the requested resource"
                                f" ({request.method})")  # fmt: skip
            if kind == "namespaces":
                return namespaces.serve(request, self.store.objects.values(), self._started,
                                        self.store.rv, self.store.clock() / 1e9)  # fmt: skip
            if kind == "crd":
                return await self.crds.serve(request, self.store.rv, self.watch_timeout_s,
                                             self.store.clock() / 1e9)  # fmt: skip
            return discovery.serve(request, self.crd if self.crd_installed else None)
        except KubeError as err:
            return _json(err.code, err.status())

    def _discovery(self) -> Obj:
        found = discovery.resource_list(self.crd, GROUP, VERSION)
        assert found is not None
        return found

    async def _send_body(
        self, request: web.Request, body: bytes, fault: KubeFault | None
    ) -> web.StreamResponse:
        kind = fault.kind if fault is not None else None
        if kind not in (KubeFaultKind.TRUNCATE, KubeFaultKind.SLOW):
            return web.Response(body=body, content_type="application/json")
        assert fault is not None
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = len(body)
        await response.prepare(request)
        if kind is KubeFaultKind.TRUNCATE:
            await response.write(body[: max(1, len(body) // 2)])
            await asyncio.sleep(0.01)  # let the partial body reach the client before the close
            close_transport(request)
            return response
        chunk = max(1, len(body) // 4)
        for start in range(0, len(body), chunk):
            await response.write(body[start : start + chunk])
            await asyncio.sleep(fault.between_s)
        await response.write_eof()
        return response

    async def wait_for_rv(self, rv: int) -> None:
        """kube waits up to 3 s for a resourceVersion from the future, then answers 504."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.too_large_wait_s
        while self.store.rv < rv:
            if loop.time() >= deadline:
                details = {"causes": [{"reason": "ResourceVersionTooLarge",
                                       "message": "Too large resource version"}],
                           "retryAfterSeconds": 1}  # fmt: skip
                message = f"Too large resource version: {rv}, current: {self.store.rv}"
                raise KubeError(504, "Timeout", message, details)
            await asyncio.sleep(0.02)

    async def _list(
        self,
        query: Mapping[str, str],
        ns: str | None,
        fault: KubeFault | None,
        *,
        as_table: bool = False,
    ) -> bytes:
        def render(objects: list[Obj], meta: Obj) -> bytes:
            return orjson.dumps(self._table(objects, query, meta))

        expired = fault is not None and fault.kind is KubeFaultKind.EXPIRE_CONTINUE
        return await list_body(self.store, query, ns, expired=expired, wait_for_rv=self.wait_for_rv,
                               rv0_ignores_limit=self.rv0_ignores_limit,
                               render=render if as_table else None)  # fmt: skip

    def _table(self, objects: list[Obj], query: Mapping[str, str], meta: Obj | None = None,
               *, headers: bool = True) -> Obj:  # fmt: skip
        include = query.get("includeObject", "Metadata") or "Metadata"
        if include not in ("None", "Metadata", "Object"):
            raise bad_request(f'includeObject: Unsupported value: "{include}"')
        return table.table(objects, self._columns, self.store.clock() / 1e9, meta=meta,
                           include=include, headers=headers)  # fmt: skip

    async def _watch(
        self, request: web.Request, ns: str | None, name: str | None, fault: KubeFault | None
    ) -> web.StreamResponse:
        render = None
        if table.wants_table(request.headers.get("Accept", "")) is not None:
            query = request.query

            def render(obj: Obj | bytes) -> Obj | bytes:
                return self._table([orjson.loads(obj) if isinstance(obj, bytes) else obj], query)

        return await serve_watch(self, request, ns, name, fault, render)
