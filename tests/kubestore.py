"""An in-memory reflector handler for tests: the objects by key, and the calls that built them."""

from __future__ import annotations

from typing import Any

from exporter.sources.kube.handler import Key, object_key, resource_version


class Store:
    """Objects by (namespace, name), with counts of the calls that built them. A LIST is taken
    page by page into `listing` and becomes `objects` at `list_done` (what it did not hold is
    gone), as the UnitSignal model's handler does."""

    def __init__(self) -> None:
        self.objects: dict[Key, Any] = {}
        self.listing: dict[Key, Any] = {}
        self.calls: dict[str, int] = {"list_done": 0, "upsert": 0, "delete": 0}
        self.pages = 0  # list_page calls (slices of LIST pages)
        self.last_now: float | None = None

    def _called(self, call: str, now: float) -> None:
        self.calls[call] += 1
        self.last_now = now

    def list_page(self, objects: list[Any], now: float) -> list[Key] | None:
        self.pages += 1
        self.last_now = now
        for obj in objects:
            key = object_key(obj)
            if key is not None:
                self.listing[key] = obj
        return None  # the reflector works the keys out

    def list_done(self, listed: set[Key], now: float) -> None:
        self._called("list_done", now)
        self.objects = {k: o for k, o in self.listing.items() if k in listed}
        self.listing = {}

    def upsert(self, obj: Any, now: float) -> None:
        self._called("upsert", now)
        key = object_key(obj)
        if key is not None:
            self.objects[key] = obj

    def delete(self, obj: Any, now: float) -> None:
        self._called("delete", now)
        key = object_key(obj)
        if key is not None:
            self.objects.pop(key, None)

    def versions(self) -> dict[Key, str | None]:
        """Each object's resourceVersion: what tests compare with the server's state."""
        return {k: resource_version(o) for k, o in self.objects.items()}
