"""LIST and WATCH requests for one resource: the only module that knows the API server's HTTP shape.

A watch may also be the streaming list (`send_initial_events`, client-go's watch-list): the
state as synthetic ADDED events, a BOOKMARK annotated `k8s.io/initial-events-end: "true"`
(`INITIAL_EVENTS_END`), then the changes, on one stream.

Callers get decoded pages and events, or `sources.http` errors that say what to do next, each with
a short bounded `result` label (the HTTP status as `status_result` bounds it, or a transport kind).

A watch is read as raw chunks split on newlines by hand: a line may span chunks, and a stream
that ends inside a line was cut, so the fragment is an error, never an event. Each line is one
`orjson.loads`; objects are not decoded into models or parsed twice.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import msgspec
import orjson

from exporter.sources.http import (
    CredentialsUnavailable,
    HttpError,
    TransportError,
    error_for_status,
    retry_after_header,
    transport_error,
)
from exporter.sources.kube.config import CredentialsError, KubeAccess
from exporter.sources.kube.typed import decode_event, decode_list


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str

    def path(self, namespace: str | None) -> str:
        prefix = f"/apis/{self.group}/{self.version}"
        if namespace:
            return f"{prefix}/namespaces/{quote(namespace, safe='')}/{self.plural}"
        return f"{prefix}/{self.plural}"


UNITSIGNALS = Resource("units.zaroz.cloud", "v1", "unitsignals")
# The annotation of the bookmark that ends a streaming list's initial events (metav1's
# InitialEventsAnnotationKey); a server that ignores sendInitialEvents never sends it.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def initial_events_end(obj: Any) -> bool:
    """Whether a BOOKMARK's object is the one that ends a streaming list's initial events."""
    meta = obj.get("metadata") if type(obj) is dict else None
    notes = meta.get("annotations") if type(meta) is dict else None
    return type(notes) is dict and notes.get(INITIAL_EVENTS_END) == "true"


@dataclass(frozen=True)
class ListPage:
    items: list[Any]
    resource_version: str
    continue_token: str | None  # None: the last page
    result: str = "200"


class _GcHold:
    """The cyclic collector paused while anybody holds it: reflectors list concurrently."""

    holders = 0
    was_enabled = False


def gc_hold() -> None:
    """Decoded API objects are millions of containers that all survive: collecting while a
    LIST is applied only walks them again and again (measured: ~4 s of a 100k-object sync)."""
    if _GcHold.holders == 0:
        _GcHold.was_enabled = gc.isenabled()
        gc.disable()
    _GcHold.holders += 1


def gc_release() -> None:
    _GcHold.holders -= 1
    if _GcHold.holders == 0 and _GcHold.was_enabled:
        gc.enable()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    gc_hold()
    try:
        yield
    finally:
        gc_release()


def _status_error(code: int, body: Any, headers: Mapping[str, str] | None) -> HttpError:
    """The error for a failed answer or a watch ERROR event (a `Status` object)."""
    message = body.get("message") if type(body) is dict else None
    message = message if type(message) is str else ""
    retry_after = retry_after_header(headers)
    if retry_after is None and type(body) is dict:
        details = body.get("details")
        ra = details.get("retryAfterSeconds") if type(details) is dict else None
        if type(ra) is int and ra > 0:
            retry_after = float(ra)
    if code == 410:
        message = message or "resource version expired"
    return error_for_status(code, message=message, retry_after=retry_after)


class WatchStream:
    """The events of one open watch, decoded; ends when the server ends the stream. Untyped:
    each event a dict; typed: each a (type, object) tuple, the object a `typed.UnitSignal`
    (or a dict when it did not fit the types)."""

    def __init__(self, resp: aiohttp.ClientResponse, typed: bool = False) -> None:
        self._resp = resp
        self._decode = _decode_typed_event if typed else _decode_event

    def close(self) -> None:
        """End the stream from this side: the reader of `events` gets a TransportError."""
        self._resp.close()

    async def events(self) -> AsyncGenerator[dict[str, Any], None]:
        """Close with `contextlib.aclosing` when not read to the end."""
        buf = b""
        try:
            async for chunk in self._resp.content.iter_any():
                buf += chunk
                if b"\n" not in chunk:
                    continue
                *lines, buf = buf.split(b"\n")
                decode = self._decode
                for line in lines:
                    if line.strip():
                        yield decode(line)
        except (TimeoutError, aiohttp.ClientError) as e:
            raise transport_error(e) from e
        if buf.strip():
            raise TransportError("truncated", f"stream ended inside a line ({len(buf)} bytes)")


def _decode_event(line: bytes) -> dict[str, Any]:
    try:
        ev = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise TransportError("invalid_body", "watch line is not JSON") from e
    if type(ev) is not dict or type(ev.get("type")) is not str:
        raise TransportError("invalid_body", "watch line is not an event")
    if ev["type"] == "ERROR":
        obj = ev.get("object")
        code = obj.get("code") if type(obj) is dict else None
        raise _status_error(code if type(code) is int else 500, obj, None)
    if type(ev.get("object")) is not dict:
        raise TransportError("invalid_body", "watch event without an object")
    return ev


def _decode_typed_event(line: bytes) -> Any:
    """A watch line typed (see `typed`): (type, object); untyped when it does not fit the
    types, an ERROR (a Status) or not JSON, so the errors are the untyped path's; a BOOKMARK
    too, since its annotations (`initial_events_end`) are not among the typed fields."""
    try:
        ev = decode_event(line)
    except msgspec.DecodeError:
        ev = None
    if ev is None or ev[0] == "ERROR" or ev[0] == "BOOKMARK":
        d = _decode_event(line)
        return d["type"], d["object"]
    return ev


class KubeApi:
    """LIST and WATCH of one resource over a shared aiohttp session.

    The session is the caller's; every reflector holds one watch connection open at a time.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        access: KubeAccess,
        resource: Resource = UNITSIGNALS,
        *,
        request_timeout: float = 60.0,
        connect_timeout: float = 10.0,
        typed: bool = False,
    ) -> None:
        self.typed = typed  # UnitSignals decoded typed (typed.py) instead of into dicts
        self.session = session
        self.access = access
        self.resource = resource
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self._options = access.request_options()

    def url(self, namespace: str | None) -> str:
        return self.access.base_url + self.resource.path(namespace)

    async def list(
        self,
        namespace: str | None,
        *,
        limit: int,
        continue_token: str | None = None,
        label_selector: str | None = None,
    ) -> ListPage:
        """One page of a LIST; without a resourceVersion, so a consistent (quorum) read."""
        params = {"limit": str(limit)}
        if continue_token:
            params["continue"] = continue_token
        if label_selector:
            params["labelSelector"] = label_selector
        timeout = aiohttp.ClientTimeout(total=self.request_timeout,
                                        sock_connect=self.connect_timeout)
        try:
            async with self._get(namespace, params, timeout) as resp:
                raw = await resp.read()
                status, headers = resp.status, resp.headers
        except (TimeoutError, aiohttp.ClientError) as e:
            raise transport_error(e) from e
        if status == 200 and self.typed and raw:
            with gc_paused():
                try:
                    fit = decode_list(raw)
                except msgspec.DecodeError:
                    fit = None  # the untyped decode below says why
            if fit is not None:
                items, rv, cont = fit
                if type(rv) is not str or not rv:
                    raise TransportError("invalid_body",
                                         "list without items or metadata.resourceVersion")
                return ListPage(items, rv, cont if cont else None)
        try:
            with gc_paused():
                body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError as e:
            if status == 200:
                raise TransportError("invalid_body", "list is not JSON") from e
            body = None
        if status != 200:
            self._refused(status)
            raise _status_error(status, body, headers)
        if type(body) is not dict:
            raise TransportError("invalid_body", "list is not an object")
        listed, meta = body.get("items"), body.get("metadata")
        if listed is None:
            listed = []
        if type(meta) is not dict:
            meta = {}  # then no resourceVersion: refused below
        rv = meta.get("resourceVersion")
        if type(listed) is not list or type(rv) is not str or not rv:
            raise TransportError("invalid_body", "list without items or metadata.resourceVersion")
        cont = meta.get("continue")
        return ListPage(listed, rv, cont if type(cont) is str and cont else None)

    @contextlib.asynccontextmanager
    async def watch(
        self,
        namespace: str | None,
        *,
        resource_version: str,
        timeout_seconds: int,
        label_selector: str | None = None,
        idle_timeout: float | None = None,
        margin: float = 30.0,
        send_initial_events: bool = False,
    ) -> AsyncIterator[WatchStream]:
        """An open WATCH from `resource_version`, with bookmarks; the server ends it after
        `timeout_seconds`, the client gives up `margin` seconds later, or after `idle_timeout`
        seconds without a byte.

        `send_initial_events`: the streaming list, from `resource_version` or, when it is "",
        from the most recent state (a consistent read), as client-go's watch-list asks for it
        (`sendInitialEvents=true&resourceVersionMatch=NotOlderThan`)."""
        if not resource_version and not send_initial_events:
            raise ValueError("a watch needs a resourceVersion (else it replays everything)")
        params = {"watch": "true"}
        if resource_version:
            params["resourceVersion"] = resource_version
        if send_initial_events:
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"
        params["allowWatchBookmarks"] = "true"
        params["timeoutSeconds"] = str(timeout_seconds)
        if label_selector:
            params["labelSelector"] = label_selector
        timeout = aiohttp.ClientTimeout(
            total=timeout_seconds + margin,
            sock_connect=self.connect_timeout,
            sock_read=idle_timeout,
        )
        try:
            async with self._get(namespace, params, timeout) as resp:
                if resp.status != 200:
                    raw = await resp.read()
                    self._refused(resp.status)
                    try:
                        body = orjson.loads(raw) if raw else None
                    except orjson.JSONDecodeError:
                        body = None
                    raise _status_error(resp.status, body, resp.headers)
                yield WatchStream(resp, self.typed)
        except (TimeoutError, aiohttp.ClientError) as e:
            raise transport_error(e) from e

    @contextlib.asynccontextmanager
    async def _get(
        self, namespace: str | None, params: dict[str, str], timeout: aiohttp.ClientTimeout
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        try:
            headers = await self.access.auth.headers()
        except CredentialsError as e:
            raise CredentialsUnavailable(str(e), result="credentials") from e
        headers["Accept"] = "application/json"
        async with self.session.get(
            self.url(namespace),
            params=params,
            headers=headers,
            timeout=timeout,
            allow_redirects=False,
            **self._options,
        ) as resp:
            yield resp

    def _refused(self, status: int) -> None:
        if status == 401:
            self.access.auth.invalidate()
