"""What a reflector delivers to, and how it names the objects it delivers.

The reflector reads the wall clock and passes it along, so a handler (the model downstream) stays
pure. A LIST is handed over page by page as it arrives (`list_page`: 100k objects are never all
held decoded), then `list_done` names every object the list held: the handler, not the
reflector, reconciles by dropping whatever is absent, so objects deleted while the watch was down
leave. A handler receives one reflector's scope: with one reflector per namespace, give each its
own handler (or one whose `list_done` only reconciles that namespace).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from exporter.model.signal import UnitSignal

Key = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped objects


class ObjectHandler(Protocol):
    """Every call a reflector makes. Objects are decoded dicts, or `typed.UnitSignal`s when the
    API client decodes typed."""

    def list_page(self, objects: list[Any], now: float) -> Iterable[Key] | None:
        """A slice of a (re)list's items, in order. Returns the keys of the objects it took;
        None when it does not say, and the reflector works them out with `object_key`."""
        ...

    def list_done(self, listed: set[Key], now: float) -> None:
        """The (re)list is complete: `listed` is every object in scope; the rest are gone."""
        ...

    def upsert(self, obj: Any, now: float) -> None:
        """A watch ADDED or MODIFIED: the object's new state."""
        ...

    def delete(self, obj: Any, now: float) -> None:
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
