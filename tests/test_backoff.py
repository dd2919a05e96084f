"""Backoff: full jitter under a doubling ceiling, reset on success, Retry-After as a floor."""

from __future__ import annotations

import random

import pytest

from exporter.sources.backoff import Backoff


def test_delays_stay_under_a_doubling_ceiling_up_to_the_cap():
    b = Backoff(base=1.0, cap=10.0, rng=random.Random(1))
    ceilings = []
    for _ in range(8):
        ceilings.append(b.ceiling())
        d = b.next()
        assert 0.0 <= d <= ceilings[-1]
    assert ceilings == [1, 2, 4, 8, 10, 10, 10, 10]


def test_full_jitter_spreads_delays_over_the_whole_range():
    b = Backoff(base=8.0, cap=8.0, rng=random.Random(2))
    delays = [b.next() for _ in range(400)]
    assert min(delays) < 0.5 and max(delays) > 7.5  # not clustered at the ceiling
    assert 3.0 < sum(delays) / len(delays) < 5.0


def test_same_seed_same_delays_and_reset_starts_over():
    a, b = Backoff(rng=random.Random(9)), Backoff(rng=random.Random(9))
    assert [a.next() for _ in range(5)] == [b.next() for _ in range(5)]
    a.next()
    a.reset()
    assert a.failures == 0 and a.ceiling() == a.base


def test_retry_after_is_a_floor_with_a_small_spread():
    b = Backoff(base=0.1, cap=1.0, rng=random.Random(3))
    for _ in range(20):
        d = b.next(retry_after=2.0)
        assert 2.0 <= d <= 2.2
    b = Backoff(base=100.0, cap=100.0, rng=random.Random(3))
    # A backoff already longer than Retry-After wins (still jittered, so check the bound).
    assert all(0.0 <= b.next(retry_after=0.5) <= 100.0 for _ in range(20))


def test_absurd_retry_after_is_capped_and_floor_applies():
    b = Backoff(base=0.1, cap=1.0, rng=random.Random(4), retry_after_cap=60.0)
    assert 60.0 <= b.next(retry_after=86_400.0) <= 66.0
    assert b.next(floor=30.0) == 30.0


def test_invalid_parameters_are_refused():
    with pytest.raises(ValueError):
        Backoff(base=0.0)
    with pytest.raises(ValueError):
        Backoff(base=5.0, cap=1.0)
