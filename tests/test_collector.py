"""serve's collector policy (exporter/commands/collector.py): nothing frozen before the sources
are ready; then the heap is frozen out of the cyclic collector's walks, and each later step
first collects the cyclic garbage made since, so what a step freezes is what is alive."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from exporter.commands.collector import Collector


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def no_auto_gc() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()
        if was:
            gc.enable()


def test_nothing_is_frozen_until_ready(no_auto_gc: None) -> None:
    c = Collector()
    assert c.step(False) is False
    assert gc.get_freeze_count() == 0
    assert c.step(True) is True
    assert gc.get_freeze_count() > 0


def test_a_later_step_collects_the_garbage_made_since_before_it_freezes(no_auto_gc: None) -> None:
    c = Collector()
    c.step(True)
    kept = Node()  # alive at the step: frozen, and still there after it
    dead = cycle()  # garbage by the next step: collected by it, not frozen
    assert dead() is not None
    frozen = gc.get_freeze_count()
    c.step(True)
    assert dead() is None
    assert kept.other is None
    assert gc.get_freeze_count() > frozen


def test_the_first_step_collects_only_the_young(no_auto_gc: None) -> None:
    """A full collection at the first step would walk the whole fleet, the stall this avoids:
    garbage already in the oldest generation is frozen with the rest."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    old = weakref.ref(a)
    gc.collect(1)
    gc.collect(1)  # survived twice: in the oldest generation now
    del a, b  # garbage there, that only a full collection would find
    assert old() is not None and gc.get_freeze_count() == 0
    Collector().step(True)
    assert old() is not None  # frozen, not walked
    gc.collect()
    assert old() is not None
