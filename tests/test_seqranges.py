"""The per-source record of delivered seqs behind duplicate accounting."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from exporter.model.seqranges import SeqRanges


@given(st.lists(st.integers(1, 300), max_size=400))
def test_add_reports_exactly_the_seqs_seen_before(seqs: list[int]):
    r, seen = SeqRanges(), set()
    for s in seqs:
        assert r.add(s) == (s in seen)
        seen.add(s)
    assert all(s in r for s in seen)
    assert r.firsts == sorted(r.firsts)
    # Ranges never touch: adjacent ones are merged.
    assert all(b + 1 < a for a, b in zip(r.firsts[1:], r.lasts[:-1], strict=True))
    assert SeqRanges.restore(r.snapshot()).snapshot() == r.snapshot()


def test_ranges_stay_bounded_by_joining_the_oldest():
    r = SeqRanges(limit=4)
    for s in range(1, 40, 2):  # every other seq: a new range each time
        r.add(s)
    assert len(r.firsts) == 4
    assert r.lasts[-1] == 39
    assert 3 in r  # the oldest holes were joined: counted as seen
    assert 40 not in r


def test_a_contiguous_stream_is_one_range():
    r = SeqRanges()
    order = list(range(1, 10_001))
    rng = random.Random(1)
    for i in range(0, len(order), 8):  # shuffled within small windows, as webhooks arrive
        chunk = order[i:i + 8]
        rng.shuffle(chunk)
        for s in chunk:
            assert not r.add(s)
    assert r.snapshot() == [[1, 10_000]]
