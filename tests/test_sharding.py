"""Stable, balanced assignment of workloads to shards."""

from __future__ import annotations

import pytest

from exporter.model.sharding import Shard, jump_hash, ordinal_from_pod_name, shard_of

WORKLOADS = [f"wl-{i}" for i in range(2000)]


def test_every_workload_has_exactly_one_shard():
    shards = [Shard(i, 3) for i in range(3)]
    for wl in WORKLOADS:
        assert sum(s.owns(wl) for s in shards) == 1


def test_assignment_is_stable_and_balanced():
    counts = [0, 0, 0, 0]
    for wl in WORKLOADS:
        assert shard_of(wl, 4) == shard_of(wl, 4)
        counts[shard_of(wl, 4)] += 1
    assert min(counts) > 400 and max(counts) < 600


def test_growing_the_shard_count_moves_few_workloads():
    moved = sum(shard_of(wl, 4) != shard_of(wl, 5) for wl in WORKLOADS)
    assert moved < len(WORKLOADS) * 0.3  # about 1/5 move, never a reshuffle
    assert all(shard_of(wl, 5) == 4 for wl in WORKLOADS if shard_of(wl, 4) != shard_of(wl, 5))


def test_jump_hash_stays_in_range_and_only_moves_keys_to_the_new_bucket():
    assert {jump_hash(k, 1) for k in range(100)} == {0}
    for n in range(1, 20):
        for k in range(0, 10**6, 7919):
            a, b = jump_hash(k, n), jump_hash(k, n + 1)
            assert 0 <= a < n and b in (a, n)


@pytest.mark.parametrize(("name", "ordinal"), [("zaroz-exporter-0", 0),
                                                ("zaroz-exporter-12", 12),
                                                ("zaroz-exporter", None), (None, None)])
def test_ordinal_from_pod_name(name, ordinal):
    assert ordinal_from_pod_name(name) == ordinal


def test_invalid_shards_are_refused():
    with pytest.raises(ValueError):
        Shard(2, 2)
    with pytest.raises(ValueError):
        Shard(0, 0)
