"""The WATCH half of the Kubernetes emulator: one chunked JSON line per event.

Semantics follow kube-apiserver's watch cache: from resourceVersion R every later event from the
history, then live ones; without R (or "0") synthetic ADDED for the current state first; a label
selector turns transitions into ADDED/DELETED; periodic BOOKMARKs when asked for; an R older
than the history is a 200 stream with one ERROR 410 event; the stream ends after timeoutSeconds.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from typing import Protocol

import orjson
from aiohttp import web

from zaroz_sim.kube.faults import KubeFault, KubeFaultKind
from zaroz_sim.kube.params import bad_request, bool_param, int_param
from zaroz_sim.kube.select import SelectorError, parse_field_selector, parse_label_selector
from zaroz_sim.kube.store import API_VERSION, KIND, Event, KubeError, Obj, ObjectStore, too_old


def close_transport(request: web.Request) -> None:
    """Close the socket under the response: the client sees EOF mid-stream or no response."""
    if request.transport is not None:
        request.transport.close()


class _Closed(Exception):
    """The stream was cut on purpose (fault) or the client went away."""


async def _cut(request: web.Request) -> None:
    """Close mid-stream, after a pause so the client has read what was sent before (aiohttp
    raises the payload error on the next read even when complete lines are still buffered)."""
    await asyncio.sleep(0.02)
    close_transport(request)
    raise _Closed


Render = Callable[[Obj | bytes], Obj | bytes]  # an event's object as the client asked (a Table)


class _Stream:
    """Writes event lines, applying a watch fault (cut, truncate, trickle) as it goes."""

    def __init__(
        self,
        request: web.Request,
        response: web.StreamResponse,
        fault: KubeFault | None,
        render: Render | None = None,
    ) -> None:
        self.request, self.response, self.fault, self.render = request, response, fault, render
        self.events = 0  # non-bookmark events written

    async def send(self, type_: str, obj: Obj | bytes) -> None:
        """One event line; `obj` may be already serialised (the store's cached bytes)."""
        if self.render is not None and type_ not in ("BOOKMARK", "ERROR"):
            obj = self.render(obj)
        raw = obj if isinstance(obj, bytes) else orjson.dumps(obj)
        line = b'{"type":"' + type_.encode() + b'","object":' + raw + b"}\n"
        fault = self.fault
        kind = fault.kind if fault is not None else None
        counted = type_ != "BOOKMARK"
        if (fault is not None and kind is KubeFaultKind.TRUNCATE and counted
                and self.events >= fault.after_events):
            await self._write(line[: max(1, len(line) // 2)])
            await _cut(self.request)
        if fault is not None and kind is KubeFaultKind.SLOW and fault.between_s > 0:
            await asyncio.sleep(fault.between_s)
        await self._write(line)
        if counted:
            self.events += 1
        await self.check_cut()

    async def check_cut(self) -> None:
        fault = self.fault
        if (
            fault is not None
            and fault.kind is KubeFaultKind.CUT
            and self.events >= fault.after_events
        ):
            await _cut(self.request)

    async def _write(self, data: bytes) -> None:
        try:
            await self.response.write(data)
        except (ConnectionError, RuntimeError):
            raise _Closed from None


class WatchHost(Protocol):
    """What a watch needs of the server it runs in (the emulator), without importing it."""

    store: ObjectStore
    watches: set[asyncio.Queue[Event | None]]
    rng: random.Random
    watch_timeout_s: tuple[float, float]
    bookmark_interval_s: float

    async def wait_for_rv(self, rv: int) -> None: ...


INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def _bookmark(rv: int, *, initial_events_end: bool = False) -> Obj:
    """A BOOKMARK's object: only the resourceVersion (and the end-of-initial-events mark)."""
    meta: Obj = {"resourceVersion": str(rv)}
    if initial_events_end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    return {"kind": KIND, "apiVersion": API_VERSION, "metadata": meta}


def _projector(
    matches: Callable[[str, Mapping[str, str]], bool],
) -> Callable[[Event], tuple[str, Obj | bytes] | None]:
    """How the watch cache shows one event to a filtered watcher (None: not at all)."""

    def project(event: Event) -> tuple[str, Obj | bytes] | None:
        now = matches(event.key, event.labels)
        before = event.prev_labels is not None and matches(event.key, event.prev_labels)
        if event.type == "ADDED":
            return ("ADDED", event.raw) if now else None
        if event.type == "DELETED":
            return ("DELETED", event.raw) if now else None
        if now and before:
            return "MODIFIED", event.raw
        if now:
            return "ADDED", event.raw
        if before:
            prev = event.prev
            assert prev is not None
            gone = prev | {"metadata": prev["metadata"] | {"resourceVersion": str(event.rv)}}
            return "DELETED", gone
        return None

    return project


async def serve_watch(
    emu: WatchHost,
    request: web.Request,
    ns: str | None,
    name: str | None,
    fault: KubeFault | None,
    render: Render | None = None,
) -> web.StreamResponse:
    """Serve one watch request until timeout, fault, client close or emulator stop; `render`
    turns each event's object into what the client asked for (a Table)."""
    query = request.query
    store = emu.store
    try:
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
    except SelectorError as exc:
        raise bad_request(str(exc)) from None
    timeout = int_param(query, "timeoutSeconds")
    bookmarks = bool_param(query, "allowWatchBookmarks") is True
    rv_text = query.get("resourceVersion", "")
    since = None if rv_text in ("", "0") else int_param(query, "resourceVersion")
    if since is not None:
        await emu.wait_for_rv(since)
    # sendInitialEvents (the streaming list; resourceVersionMatch=NotOlderThan, checked before):
    # true sends the current state (at least as new as `since`) as ADDED events, then a BOOKMARK
    # marked initial-events-end (if bookmarks are allowed); false sends no state at all.
    send_initial = bool_param(query, "sendInitialEvents")
    resume = since is not None and send_initial is not True  # from `since`, out of the history

    by_key = ns is not None or name is not None or bool(query.get("fieldSelector", "").strip())

    def matches(key: str, obj_labels: Mapping[str, str]) -> bool:
        if not by_key:
            return labels(obj_labels)
        obj_ns, obj_name = key.split("/", 1)
        return ((ns is None or obj_ns == ns) and (name is None or obj_name == name)
                and labels(obj_labels) and fields(
                    {"metadata": {"namespace": obj_ns, "name": obj_name}}))  # fmt: skip

    project = _projector(matches)
    error: KubeError | None = None
    if fault is not None and fault.kind is KubeFaultKind.EXPIRE_WATCH:
        error = too_old(since if since is not None else store.rv, store.rv)
    elif resume and since is not None:
        store.expire()
        if since < store.floor:
            error = too_old(since, store.floor + 1)

    # Register and read the starting point with no await in between: no gap, no duplicate.
    queue: asyncio.Queue[Event | None] = asyncio.Queue()
    initial: list[tuple[int, tuple[str, Obj | bytes] | None]] = []
    seen = store.rv
    if error is None:
        store.listeners.add(queue.put_nowait)
        emu.watches.add(queue)
        if send_initial is False and since is None:
            pass  # from now on, no state
        elif not resume:
            initial = [(store.rv, ("ADDED", store.raw[key])) for key, obj in store.items()
                       if matches(key, obj["metadata"].get("labels", {}))]  # fmt: skip
        else:
            assert since is not None
            initial = [(ev.rv, project(ev)) for ev in store.events_since(since)]
            seen = since
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    try:
        if fault is not None and fault.kind is KubeFaultKind.SLOW:
            await asyncio.sleep(fault.delay_s)
        await response.prepare(request)
        stream = _Stream(request, response, fault, render)
        if error is not None:
            await stream.send("ERROR", error.status())
            await response.write_eof()
            return response
        loop = asyncio.get_running_loop()
        duration = timeout if timeout and timeout > 0 else emu.rng.uniform(*emu.watch_timeout_s)
        deadline = loop.time() + duration
        next_bookmark = loop.time() + emu.bookmark_interval_s
        await stream.check_cut()
        for rv, shown in initial:
            if shown is not None:
                await stream.send(*shown)
            seen = max(seen, rv)
        if send_initial is True and bookmarks:
            await stream.send("BOOKMARK", _bookmark(seen, initial_events_end=True))
            next_bookmark = loop.time() + emu.bookmark_interval_s
        while (now := loop.time()) < deadline:
            if bookmarks and now >= next_bookmark:
                await stream.send("BOOKMARK", _bookmark(seen))
                next_bookmark = now + emu.bookmark_interval_s
                continue
            until = min(deadline, next_bookmark) if bookmarks else deadline
            try:
                event = await asyncio.wait_for(queue.get(), until - now)
            except TimeoutError:
                continue
            if event is None:
                break
            seen = event.rv
            shown = project(event)
            if shown is not None:
                await stream.send(*shown)
        await response.write_eof()
    except (_Closed, ConnectionError):
        pass
    finally:
        store.listeners.discard(queue.put_nowait)
        emu.watches.discard(queue)
    return response
