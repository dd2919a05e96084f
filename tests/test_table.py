"""Per-object families rendered in chunks: what a scrape shows is every live row, once."""

from __future__ import annotations

import random

from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.table import CHUNK, Column, RowTable


def test_chunks_show_every_row_once_through_puts_updates_and_removes():
    reg = Registry()
    fam = reg.table("zaroz_unitsignal_ready")
    odd = reg.table("zaroz_unitsignal_labels")  # a column that skips some rows
    clock = [0.0]
    live = reg.table("zaroz_unitsignal_generation_lag_seconds")
    RowTable([
        Column(fam, lambda rows: "".join(f"{fam.prefix}{b}}} {s}\n" for b, s in rows)),
        Column(odd, lambda rows: "".join(f"{odd.prefix}{b}}} 1\n" for b, s in rows if s % 2),
               count=lambda rows: sum(1 for _, s in rows if s % 2)),
        Column(live, lambda rows: "".join(f"{live.prefix}{b}}} {clock[0] - s}\n"
                                          for b, s in rows if s % 3 == 0),
               live=lambda r: r[1] % 3 == 0, count=lambda rows: sum(1 for _, s in rows
                                                                   if s % 3 == 0)),
    ], lambda keys, states: [f'{{o="{key}"' for key in keys])
    table = fam.table
    assert table is not None
    rng = random.Random(7)
    expected: dict[str, int] = {}
    for step in range(3000):
        key = f"o{rng.randrange(5 * CHUNK)}"
        if rng.random() < 0.3:
            table.remove(key)
            expected.pop(key, None)
        elif key in expected and rng.random() < 0.5:
            expected[key] = rng.randrange(100)
            table.update(key, expected[key])
        else:
            expected[key] = rng.randrange(100)
            table.put(key, expected[key])
        if rng.random() < 0.3:
            clock[0] = float(step)
            lines = fam.body().decode().splitlines()
            assert sorted(lines) == sorted(f'{fam.prefix}{{o="{k}"}} {v}' for k, v in
                                           expected.items())
            assert len(fam) == len(expected)
            odd_lines = odd.body().decode().splitlines()
            assert sorted(odd_lines) == sorted(f'{odd.prefix}{{o="{k}"}} 1' for k, v in
                                               expected.items() if v % 2)
            assert len(odd) == len(odd_lines)
            # a live column is read again at every scrape, even for rows that did not change
            assert sorted(live.body().decode().splitlines()) == sorted(
                f'{live.prefix}{{o="{k}"}} {clock[0] - v}' for k, v in expected.items()
                if v % 3 == 0)
    assert len(table) == len(expected)
    assert len(table.keys) <= 5 * CHUNK  # freed slots are reused
