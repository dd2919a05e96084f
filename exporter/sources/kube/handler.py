"""What a reflector delivers to, and the smallest thing that can receive it.

The reflector reads the wall clock and passes it along, so a handler (the model downstream) stays
pure. `replace` carries the whole set after every (re)list: the handler, not the reflector,
reconciles by dropping whatever is absent, so objects deleted while the watch was down leave.
A handler receives one reflector's scope: with one reflector per namespace, give each its own
handler (or one whose `replace` only reconciles that namespace).
"""

from __future__ import annotations

from typing import Any, Protocol

from exporter.model.signal import UnitSignal

Key = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped objects


class ObjectHandler(Protocol):
    def replace(self, objects: list[dict[str, Any]], now: float) -> None:
        """A full (re)list: the whole set of objects in scope."""
        ...

    def upsert(self, obj: dict[str, Any], now: float) -> None:
        """A watch ADDED or MODIFIED: the object's new state."""
        ...

    def delete(self, obj: dict[str, Any], now: float) -> None:
        """A watch DELETED: the object's last state."""
        ...


def object_key(obj: Any) -> Key | None:
    """(namespace, name) of an object; None when it has no name (it cannot be tracked)."""
    if type(obj) is UnitSignal:
        m = obj.metadata
        name, ns = m.name, m.namespace
        return (ns if ns is not None else "", name) if name else None
    meta = obj.get("metadata") if type(obj) is dict else None
    if type(meta) is not dict:
        return None
    name, ns = meta.get("name"), meta.get("namespace")
    if type(name) is not str or not name:
        return None
    return (ns if type(ns) is str else "", name)


def resource_version(obj: Any) -> str | None:
    if type(obj) is UnitSignal:
        return obj.metadata.resourceVersion or None
    meta = obj.get("metadata") if type(obj) is dict else None
    rv = meta.get("resourceVersion") if type(meta) is dict else None
    return rv if type(rv) is str and rv else None


class Store:
    """Objects by (namespace, name), with counts of the calls that built it (for tests)."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.calls: dict[str, int] = {"replace": 0, "upsert": 0, "delete": 0}
        self.last_now: float | None = None

    def replace(self, objects: list[dict[str, Any]], now: float) -> None:
        self.calls["replace"] += 1
        self.last_now = now
        fresh = {}
        for obj in objects:
            key = object_key(obj)
            if key is not None:
                fresh[key] = obj
        self.objects = fresh

    def upsert(self, obj: dict[str, Any], now: float) -> None:
        self.calls["upsert"] += 1
        self.last_now = now
        key = object_key(obj)
        if key is not None:
            self.objects[key] = obj

    def delete(self, obj: dict[str, Any], now: float) -> None:
        self.calls["delete"] += 1
        self.last_now = now
        key = object_key(obj)
        if key is not None:
            self.objects.pop(key, None)

    def versions(self) -> dict[Key, str | None]:
        """Each object's resourceVersion: what tests compare with the server's state."""
        return {k: resource_version(o) for k, o in self.objects.items()}
