"""LIST as kube-apiserver serves it: pages of `limit` at one resourceVersion (a snapshot of the
store), continue tokens, remainingItemCount, the resourceVersion/resourceVersionMatch rules, and
the 410 of an expired continue token with kube's -1 continuation.
"""

from __future__ import annotations

import base64
import binascii
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Mapping

import orjson

from zaroz_sim.kube.params import bad_request, int_param
from zaroz_sim.kube.select import SelectorError, parse_field_selector, parse_label_selector
from zaroz_sim.kube.store import API_VERSION, KIND, KubeError, Obj, ObjectStore

_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


def encode_continue(rv: int, start: str) -> str:
    """kube's token: base64url (no padding) of {"v","rv","start"}; start is the next key. An rv
    of -1 (what a 410 offers, as the etcd3 store's handleCompactedErrorForPaging) continues at
    the latest revision: an inconsistent list, by the client's choice."""
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_continue(token: str) -> tuple[int, str]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if data["v"] != "meta.k8s.io/v1" or not isinstance(data["rv"], int):
            raise ValueError(data)
        if data["rv"] == 0 or data["rv"] < -1:
            raise ValueError(f"invalid resource version {data['rv']} in continue token")
        start = data["start"]
        if not isinstance(start, str) or start.startswith("/") or ".." in start:
            raise ValueError(start)
        return data["rv"], start
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise bad_request(f"continue key is not valid: {exc}") from None


async def list_body(
    store: ObjectStore,
    query: Mapping[str, str],
    ns: str | None,
    *,
    expired: bool,
    wait_for_rv: Callable[[int], Awaitable[None]],
    rv0_ignores_limit: bool,
    render: Callable[[list[Obj], Obj], bytes] | None = None,
) -> bytes:
    """The UnitSignalList body: the page's cached object bytes joined into `items` (or the
    `render`ed Table). `expired`: the continue token answers 410 whatever its age (a fault)."""
    try:
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
    except SelectorError as exc:
        raise bad_request(str(exc)) from None
    limit = max(0, int_param(query, "limit") or 0)
    token = query.get("continue", "")
    rv_text = query.get("resourceVersion", "")
    match = query.get("resourceVersionMatch", "")
    prefix = "" if ns is None else f"{ns}/"
    start = ""
    if token:
        if rv_text or match:
            raise bad_request("specifying resource version is not allowed when using continue")
        snap_rv, start = decode_continue(token)
        store.expire()
        if expired or (snap_rv != -1 and snap_rv < store.floor):
            err = KubeError(410, "Expired", _CONTINUE_EXPIRED)
            fresh = encode_continue(-1, start)  # an inconsistent continuation, as kube's
            raise _StatusBody(410, err.status() | {"metadata": {"continue": fresh}})
        view = store.current() if snap_rv == -1 else store.snapshot(snap_rv)
    elif rv_text in ("", "0"):
        view = store.current()
        if rv_text == "0" and rv0_ignores_limit:
            limit = 0  # served from the watch cache, which ignores limit
    else:
        rv = int_param(query, "resourceVersion")
        assert rv is not None
        await wait_for_rv(rv)
        if match == "Exact" or (not match and limit > 0):
            store.expire()
            if rv < store.floor:
                raise KubeError(
                    410, "Expired", "The resourceVersion for the provided list is too old."
                )
            view = store.snapshot(rv)
        else:
            view = store.current()
    keys = view.keys
    first = bisect_left(keys, prefix + start)
    end = len(keys) if ns is None else bisect_left(keys, f"{ns}0")  # "0" sorts after "/"
    items: list[bytes] = []
    chosen: list[str] = []
    meta: Obj = {"resourceVersion": str(view.rv)}
    for i in range(first, end):
        key = keys[i]
        obj = view.objects[key]
        if labels(obj["metadata"].get("labels", {})) and fields(obj):
            items.append(view.raw[key])
            chosen.append(key)
        if limit and len(items) == limit and i + 1 < end:
            meta["continue"] = encode_continue(view.rv, key[len(prefix) :] + "\x00")
            if query.get("labelSelector", "") == query.get("fieldSelector", "") == "":
                meta["remainingItemCount"] = end - i - 1
            break
    if render is not None:
        return render([view.objects[k] for k in chosen], meta)
    head = orjson.dumps({"apiVersion": API_VERSION, "kind": f"{KIND}List", "metadata": meta})
    return head[:-1] + b',"items":[' + b",".join(items) + b"]}"


class _StatusBody(KubeError):
    """A KubeError whose Status body carries extra list metadata (the 410 continue token)."""

    def __init__(self, code: int, body: Obj) -> None:
        super().__init__(code, body["reason"], body["message"])
        self._body = body

    def status(self) -> Obj:
        return self._body
