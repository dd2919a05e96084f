"""A Kubernetes API server emulator for `unitsignals.units.zaroz.cloud/v1`, on loopback.

It speaks the real wire protocol (LIST with limit/continue over a consistent snapshot, WATCH
from a resourceVersion with bookmarks, 410 Expired, timeoutSeconds, metav1.Status errors), so
the exporter's Kubernetes source can be tested against what kube-apiserver really does. The
object store lives in `kube_store`, selectors in `kube_select`, scripted faults in `kube_faults`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import random
import re
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from zaroz_sim.kube.faults import KubeFault, KubeFaultKind, KubeFaults
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
)
from zaroz_sim.kube.watch import bad_request, close_transport, int_param, serve_watch

__all__ = ["KubeEmulator", "KubeError", "KubeFaultKind", "KubeFaults", "KubeRequest",
           "decode_continue", "encode_continue"]  # fmt: skip

_PREFIX = f"/apis/{GROUP}/{VERSION}"
_PATH = re.compile(rf"{_PREFIX}(?:/namespaces/([^/]+))?/{PLURAL}(?:/([^/]+)(/status)?)?/?")
_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})
_FALSE = frozenset({"0", "f", "F", "false", "FALSE", "False"})
_REASONS = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
            504: "Timeout"}  # fmt: skip
_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


@dataclass(frozen=True)
class KubeRequest:
    """One request as seen by the emulator: kind is list, watch, get, discovery or other."""

    kind: str
    path: str
    query: dict[str, str]


def _json(status: int, body: Any, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), headers=headers,
                        content_type="application/json")  # fmt: skip


def encode_continue(rv: int, start: str) -> str:
    """kube's token: base64url (no padding) of {"v","rv","start"}; start is the next key."""
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_continue(token: str) -> tuple[int, str]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if data["v"] != "meta.k8s.io/v1" or not isinstance(data["rv"], int) or data["rv"] < 1:
            raise ValueError(data)
        start = data["start"]
        if not isinstance(start, str) or start.startswith("/") or ".." in start:
            raise ValueError(start)
        return data["rv"], start
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise bad_request(f"continue key is not valid: {exc}") from None


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
        history: int = 1000,
        clock: Callable[[], int] = time.time_ns,
        start_rv: int = 1,
        seed: int | None = None,
        bookmark_interval_s: float = 60.0,
        watch_timeout_s: tuple[float, float] = (30.0, 60.0),
        too_large_wait_s: float = 3.0,
        rv0_ignores_limit: bool = True,
        faults: KubeFaults | None = None,
        spec_manager: str = "kernel",
        status_manager: str = "zaroz-agent",
        crd_installed: bool = True,
    ) -> None:
        self.crd_installed = crd_installed  # False: the group/version is not served at all
        self.store = ObjectStore(
            history=history, clock=clock, start_rv=start_rv, seed=seed,
            spec_manager=spec_manager, status_manager=status_manager,
        )  # fmt: skip
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
        for queue in list(self.watches):
            queue.put_nowait(None)

    def install_crd(self) -> None:
        """The CRD is created (again): served from now on, empty. Its watch cache starts at the
        current revision, so a watch resuming from before it gets 410 and relists."""
        if not self.crd_installed:
            self.crd_installed = True
            self.store.compact()

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
        for queue in list(self.watches):
            queue.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- HTTP ------------------------------------------------------------------------------------

    def _classify(self, request: web.Request) -> tuple[str, str | None, str | None]:
        if request.path.rstrip("/") == _PREFIX:
            return "discovery", None, None
        m = _PATH.fullmatch(request.path)
        if m is None or (m[1] is None and m[2] is not None):
            return "other", None, None
        watch = request.query.get("watch", "")
        if watch and watch not in _TRUE | _FALSE:
            return "other", None, None
        if watch in _TRUE:
            return "watch", m[1], m[2]
        return ("get" if m[2] else "list"), m[1], m[2]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        kind, ns, name = self._classify(request)
        self.requests[kind] += 1
        self.request_log.append(KubeRequest(kind, request.path, dict(request.query)))
        if self.token is not None and request.headers.get("Authorization") != (
            f"Bearer {self.token}"
        ):
            return _json(401, KubeError(401, "Unauthorized", "Unauthorized").status())
        try:
            if request.method != "GET":
                raise KubeError(405, "MethodNotAllowed",
                                f"the server does not allow this method on the requested resource"
                                f" ({request.method})")  # fmt: skip
            if kind == "other" or not self.crd_installed:
                raise KubeError(404, "NotFound", "the server could not find the requested resource")
            if kind == "discovery":
                return _json(200, self._discovery())
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
            if kind == "get":
                assert ns is not None and name is not None
                body = self.store.get_raw(ns, name)
            else:
                body = await self._list(request.query, ns, fault)
            return await self._send_body(request, body, fault)
        except KubeError as err:
            return _json(err.code, err.status())

    @staticmethod
    def _discovery() -> Obj:
        verbs = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
        resources = [
            {"name": PLURAL, "singularName": "unitsignal", "namespaced": True, "kind": KIND,
             "verbs": verbs},
            {"name": f"{PLURAL}/status", "singularName": "", "namespaced": True, "kind": KIND,
             "verbs": ["get", "patch", "update"]},
        ]  # fmt: skip
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION,
                "resources": resources}  # fmt: skip

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
        self, query: Mapping[str, str], ns: str | None, fault: KubeFault | None
    ) -> bytes:
        """The UnitSignalList body: the page's cached object bytes joined into `items`."""
        try:
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(query.get("fieldSelector"))
        except SelectorError as exc:
            raise bad_request(str(exc)) from None
        limit = max(0, int_param(query, "limit") or 0)
        token = query.get("continue", "")
        rv_text = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch", "")
        if match and match not in ("Exact", "NotOlderThan"):
            raise bad_request(f'resourceVersionMatch: Unsupported value: "{match}"')
        if match and not rv_text:
            raise bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided"
            )
        if match == "Exact" and rv_text == "0":
            raise bad_request('resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
        prefix = "" if ns is None else f"{ns}/"
        start = ""
        if token:
            if rv_text or match:
                raise bad_request("specifying resource version is not allowed when using continue")
            snap_rv, start = decode_continue(token)
            expired = fault is not None and fault.kind is KubeFaultKind.EXPIRE_CONTINUE
            if expired or snap_rv < self.store.floor:
                err = KubeError(410, "Expired", _CONTINUE_EXPIRED)
                fresh = encode_continue(self.store.rv, start)  # an inconsistent continuation
                raise _StatusBody(410, err.status() | {"metadata": {"continue": fresh}})
            view = self.store.snapshot(snap_rv)
        elif rv_text in ("", "0"):
            view = self.store.current()
            if rv_text == "0" and self.rv0_ignores_limit:
                limit = 0  # served from the watch cache, which ignores limit
        else:
            rv = int_param(query, "resourceVersion")
            assert rv is not None
            await self.wait_for_rv(rv)
            if match == "Exact" or (not match and limit > 0):
                if rv < self.store.floor:
                    raise KubeError(
                        410, "Expired", "The resourceVersion for the provided list is too old."
                    )
                view = self.store.snapshot(rv)
            else:
                view = self.store.current()
        keys = view.keys
        first = bisect_left(keys, prefix + start)
        end = len(keys) if ns is None else bisect_left(keys, f"{ns}0")  # "0" sorts after "/"
        items: list[bytes] = []
        meta: Obj = {"resourceVersion": str(view.rv)}
        for i in range(first, end):
            key = keys[i]
            obj = view.objects[key]
            if labels(obj["metadata"].get("labels", {})) and fields(obj):
                items.append(view.raw[key])
            if limit and len(items) == limit and i + 1 < end:
                meta["continue"] = encode_continue(view.rv, key[len(prefix) :] + "\x00")
                if query.get("labelSelector", "") == query.get("fieldSelector", "") == "":
                    meta["remainingItemCount"] = end - i - 1
                break
        head = orjson.dumps({"apiVersion": API_VERSION, "kind": f"{KIND}List", "metadata": meta})
        return head[:-1] + b',"items":[' + b",".join(items) + b"]}"

    async def _watch(
        self, request: web.Request, ns: str | None, name: str | None, fault: KubeFault | None
    ) -> web.StreamResponse:
        return await serve_watch(self, request, ns, name, fault)


class _StatusBody(KubeError):
    """A KubeError whose Status body carries extra list metadata (the 410 continue token)."""

    def __init__(self, code: int, body: Obj) -> None:
        super().__init__(code, body["reason"], body["message"])
        self._body = body

    def status(self) -> Obj:
        return self._body
