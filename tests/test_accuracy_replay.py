"""Replay of simulated logs reproduces the simulator's ground truth; order and repeats do not
matter."""

from __future__ import annotations

import random

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.cli import main
from exporter.sinks.metrics.exposition import render_bytes
from exporter.wiring.events import Pipeline
from tests.simlogs import assert_matches_truth, finite_logs, parse

LOGS, TRUTH = finite_logs()


def test_sim_logs_are_rich_enough_to_test_every_rule():
    wl = next(iter(LOGS))
    assert len(LOGS[wl]) > 500
    assert TRUTH.allocations.get((wl, "superseded"), 0) > 0
    assert TRUTH.allocations.get((wl, "abandoned"), 0) > 0
    assert sum(TRUTH.skew.values()) > 0


def test_replay_command_matches_ground_truth(tmp_path, capsysbinary):
    files = []
    for wl, evs in LOGS.items():
        p = tmp_path / f"{wl}.jsonl"
        p.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in evs))
        files.append(str(p))
    assert main(["replay", *files]) == 0
    out = capsysbinary.readouterr().out.decode()
    checks = assert_matches_truth(parse(out), TRUTH, list(LOGS))
    assert checks > 50


def test_replay_summary_lists_every_workload(tmp_path, capsys):
    files = []
    for wl, evs in LOGS.items():
        p = tmp_path / f"{wl}.jsonl"
        p.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in evs) + b"{broken\n")
        files.append(str(p))
    assert main(["replay", "--summary", *files]) == 0
    out = capsys.readouterr().out
    for wl in LOGS:
        ready = [line for line in out.splitlines() if line.startswith(wl) and " ready " in line]
        assert ready and ready[0].split()[2] == str(len(TRUTH.ready[wl]))
    assert "invalid" in out


def test_replay_names_the_workload_of_every_file(tmp_path, capsysbinary):
    wl, evs = next(iter(LOGS.items()))
    p = tmp_path / "some-file.jsonl"
    p.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in evs))
    assert main(["replay", "--workload", wl, str(p)]) == 0
    assert_matches_truth(parse(capsysbinary.readouterr().out.decode()), TRUTH, [wl])


def test_replay_of_a_missing_file_is_a_clear_error(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


def _exposition(lines: list[bytes], wl: str) -> bytes:
    p = Pipeline()
    log = p.workload(wl)
    for line in lines:
        log.offer(orjson.loads(line))
    log.flush()
    return render_bytes(p.registry)


WL, EVENTS = next(iter(LOGS.items()))
LINES = [orjson.dumps(e) for e in EVENTS[:400]]
BASELINE = parse(_exposition(LINES, WL).decode())


def _without_duplicate_count(samples: dict) -> dict:
    return {k: v for k, v in samples.items() if k[0] != "zaroz_events_duplicate_total"}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), dup_fraction=st.floats(0, 1))
def test_duplicating_and_shuffling_lines_changes_nothing(seed, dup_fraction):
    rng = random.Random(seed)
    dups = rng.sample(LINES, int(len(LINES) * dup_fraction))
    mixed = LINES + dups
    rng.shuffle(mixed)
    got = parse(_exposition(mixed, WL).decode())
    assert _without_duplicate_count(got) == _without_duplicate_count(BASELINE)
    assert got.get(("zaroz_events_duplicate_total",
                    frozenset({("workload", WL), ("source", "file")})), 0) == len(dups)
