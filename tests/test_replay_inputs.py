"""`replay` reads directories, gzip files and stdin, and `--explain` says where and why each bad
line failed. The real CLI runs as a subprocess."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import orjson

from tests.simlogs import assert_matches_truth, finite_logs, parse

ROOT = Path(__file__).resolve().parent.parent
LOGS, TRUTH = finite_logs(seed=3, workloads=2, seconds=200)


def run(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZAROZ_EXPORTER_")}
    return subprocess.run([sys.executable, "-m", "exporter.cli", "replay", *argv], cwd=ROOT,
                          env={**env, "PYTHONPATH": str(ROOT)}, input=stdin,
                          capture_output=True, timeout=120)


def _jsonl(events: list[dict]) -> bytes:
    return b"".join(orjson.dumps(e) + b"\n" for e in events)


def test_directory_of_plain_and_gzip_logs(tmp_path):
    (a, ea), (b, eb) = LOGS.items()
    (tmp_path / f"{a}.jsonl").write_bytes(_jsonl(ea))
    (tmp_path / f"{b}.jsonl.gz").write_bytes(gzip.compress(_jsonl(eb)))
    (tmp_path / "notes.txt").write_text("not a log")
    res = run(str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert assert_matches_truth(parse(res.stdout.decode()), TRUTH, [a, b]) > 20


def test_gzip_file_whatever_its_name(tmp_path):
    wl, evs = next(iter(LOGS.items()))
    p = tmp_path / "rotated.1"
    p.write_bytes(gzip.compress(_jsonl(evs)))
    res = run("--workload", wl, str(p))
    assert res.returncode == 0, res.stderr
    assert_matches_truth(parse(res.stdout.decode()), TRUTH, [wl])


def test_stdin(tmp_path):
    wl, evs = next(iter(LOGS.items()))
    res = run("--workload", wl, "-", stdin=_jsonl(evs))
    assert res.returncode == 0, res.stderr
    assert_matches_truth(parse(res.stdout.decode()), TRUTH, [wl])


def test_gzip_on_stdin_without_workload_is_named_stdin():
    evs = next(iter(LOGS.values()))
    res = run("-", stdin=gzip.compress(_jsonl(evs[:50])))
    assert res.returncode == 0, res.stderr
    assert b'zaroz_events_total{workload="stdin"' in res.stdout


def test_empty_directory_and_missing_path_are_one_line_errors(tmp_path):
    for arg, cause in ((str(tmp_path), "holds no *.jsonl"), (str(tmp_path / "no"), "no such")):
        res = run(arg)
        assert res.returncode == 2
        err = res.stderr.decode().splitlines()
        assert len(err) == 1 and arg in err[0] and cause in err[0]


def test_explain_gives_file_line_and_the_schema_reason(tmp_path):
    wl, evs = next(iter(LOGS.items()))
    bad_type = {**evs[3], "occurred_at": "yesterday"}
    no_id = {k: v for k, v in evs[5].items() if k != "id"}
    lines = [*evs[:3], bad_type, evs[4], no_id, "{oops", *evs[6:10]]
    body = b"".join((x.encode() if isinstance(x, str) else orjson.dumps(x)) + b"\n"
                    for x in lines)
    p = tmp_path / f"{wl}.jsonl.gz"
    p.write_bytes(gzip.compress(body))
    res = run("--explain", str(p))
    assert res.returncode == 0
    err = res.stderr.decode().splitlines()
    assert len(err) == 3, err
    assert err[0].startswith(f"{p}:4: $.occurred_at: ") and "yesterday" in err[0]
    assert err[1] == f"{p}:6: $: 'id' is a required property"
    assert err[2].startswith(f"{p}:7: not JSON")
    out = res.stdout.decode()
    assert f'zaroz_events_invalid_total{{workload="{wl}",reason="schema"}} 2' in out
    assert f'zaroz_events_invalid_total{{workload="{wl}",reason="json"}} 1' in out


def test_explain_is_capped(tmp_path):
    p = tmp_path / "wl.jsonl"
    p.write_text("".join(f'{{"n": {i}}}\n' for i in range(30)))
    res = run("--explain", "--explain-max", "5", str(p))
    err = res.stderr.decode().splitlines()
    assert len(err) == 6
    assert [e.split(":")[1] for e in err[:5]] == ["1", "2", "3", "4", "5"]
    assert "25 more invalid lines" in err[5]


def test_without_explain_nothing_is_said(tmp_path):
    p = tmp_path / "wl.jsonl"
    p.write_text('{"n": 1}\n')
    res = run(str(p))
    assert res.returncode == 0 and res.stderr == b""


def test_explain_with_report_is_a_one_line_error(tmp_path):
    p = tmp_path / "wl.jsonl"
    p.write_text('{"n": 1}\n')
    res = run("--explain", "--report", str(tmp_path / "r.html"), str(p))
    assert res.returncode == 2
    err = res.stderr.decode().splitlines()
    assert len(err) == 1 and "--explain" in err[0] and "--report" in err[0]
    assert not (tmp_path / "r.html").exists()
