"""`replay --report`: one self-contained HTML file whose numbers equal `replay --summary`'s, with
every anomaly located, the slowest units' timelines and trace ids; opened in headless Chromium
with no console error, no empty chart and no overflowing text."""

from __future__ import annotations

import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import orjson
import pytest

from exporter.model.traceids import trace_hex
from tests.browser import chromium, look
from tests.simlogs import finite_logs

LOGS, TRUTH = finite_logs(seed=3, workloads=2, seconds=900)
GONE: list[int] = []  # the seq taken out of the first log


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The simulator's logs, with a line that is not JSON, a duplicate and a gap added to the
    first, at known lines."""
    d = tmp_path_factory.mktemp("logs")
    files = []
    for i, (wl, evs) in enumerate(LOGS.items()):
        lines = [orjson.dumps(e) for e in evs]
        if i == 0:
            lines.insert(10, b"{not json")  # line 11
            lines.insert(20, lines[5])  # line 21 repeats seq 6 (line 6)
            GONE.append(orjson.loads(lines.pop(40))["seq"])  # missing: a gap
            lines.insert(3, b"   ")  # a blank line: not an anomaly, but lines below move
            lines.insert(80, lines[79])  # line 81 repeats the event of line 80
        p = d / f"{wl}.jsonl"
        p.write_bytes(b"\n".join(lines) + b"\n")
        files.append(p)
    return files


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exporter.cli", "replay", *args],
                          capture_output=True, text=True, check=True, timeout=120)


@pytest.fixture(scope="module")
def report(logs: list[Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("report") / "report.html"
    res = _cli("--report", str(out), *map(str, logs))
    assert res.stdout.startswith("# HELP")  # the exposition still goes to stdout
    return out, out.read_text(encoding="utf-8")


def test_numbers_equal_the_summary(logs: list[Path], report: tuple[Path, str]) -> None:
    summary = _cli("--summary", *map(str, logs)).stdout
    expected = {}
    for line in summary.splitlines():
        f = line.split()
        if len(f) == 6 and f[1] in ("ready", "allocation_ack", "drain"):
            expected[(f[0], f[1])] = f[2:]
    got = {}
    for wl, m, cells in re.findall(
            r'<tr class="numbers" data-workload="([^"]+)" data-measurement="([^"]+)">(.*?)</tr>',
            report[1]):
        got[(wl, m)] = re.findall(r'data-k="(?:count|p50|p95|p99)">([^<]*)<', cells)
    assert len(expected) == 3 * len(LOGS)
    assert got == expected
    assert all(int(v[0]) > 10 for v in got.values())


def _section(html: str, wl: str) -> str:
    return html.split(f'id="wl-{wl}"')[1].split('<section class="wl"')[0]


def test_anomalies_are_located(report: tuple[Path, str], logs: list[Path]) -> None:
    html = report[1]
    first = logs[0].name
    kinds = {"duplicate": "duplicates", "gap": "gaps", "invalid": "invalid",
             "clock skew": "clock skew"}
    for wl in LOGS:
        section = _section(html, wl)
        rows = re.findall(r'<tr class="anomaly" data-kind="([^"]+)"><td>[^<]*</td><td><code>'
                          r"([^<]*)</code></td><td><code>([^<]*)</code></td>", section)
        for kind, counter in kinds.items():  # one row for each counted anomaly
            count = re.search(rf'data-count="{counter}">{counter} (\d+)<', section)
            assert count, counter
            assert sum(1 for r in rows if r[0] == kind) == int(count.group(1)), kind
        if wl == logs[0].stem:
            assert ("invalid", f"{first}:12", "–") in rows
            assert ("duplicate", f"{first}:22", "6") in rows
            dup = orjson.loads(logs[0].read_bytes().splitlines()[80])["seq"]
            assert ("duplicate", f"{first}:81", str(dup)) in rows
            # Skews are found when the event is applied, for most of this log long after it
            # was read (it waited behind the gap): each still names its own line and seq.
            text = logs[0].read_bytes().splitlines()
            skews = [r for r in rows if r[0] == "clock skew"]
            assert skews
            for _, where, seq in skews:
                line = int(where.rsplit(":", 1)[1])
                assert orjson.loads(text[line - 1])["seq"] == int(seq), (where, seq)
            assert [r[2] for r in rows if r[0] == "gap"] == [f"{GONE[0]}-{GONE[0]}"]
    assert html.count('data-kind="clock skew"') >= 1


def test_slowest_units_with_trace_ids(report: tuple[Path, str], logs: list[Path]) -> None:
    html = report[1]
    for wl in LOGS:
        section = _section(html, wl)
        units = re.findall(r'<tr data-unit="([^"]+)" data-ready-ns="(\d*)"><td><code>[^<]*'
                           r'</code></td><td><code class="trace">([0-9a-f]{32})</code>', section)
        assert len(units) >= 5
        assert all(trace_hex(wl, unescape(u)) == t for u, _, t in units)
        assert section.count('class="chart lane"') == len(units)
        if wl != logs[0].stem:  # an untouched log: the slowest is the truth's slowest
            assert max(int(n) for _, n, _ in units if n) == max(TRUTH.ready[wl])


def test_self_contained(report: tuple[Path, str]) -> None:
    html = report[1]
    assert "<script" not in html and "src=" not in html
    assert not re.search(r'href="https?:', html)


async def test_report_in_chromium(report: tuple[Path, str], tmp_path: Path) -> None:
    chromium()
    seen = await look(report[0].as_uri(), tmp_path, "report")
    seen.assert_looks_right(min_charts=6 * len(LOGS))


def _skewing_events() -> list[bytes]:
    """Seqs 1-12 of the golden input, seq 11 (unit.ready) stamped before its unit's creation."""
    import gzip

    from tests.data.replay_golden.make import inputs

    evs = [orjson.loads(line) for line in gzip.decompress(inputs()[0].read_bytes()).splitlines()
           if line.startswith(b'{"')][:12]
    assert [e["seq"] for e in evs] == list(range(1, 13)) and evs[10]["type"] == "unit.ready"
    assert evs[3]["type"] == "unit.created" and evs[3]["unit"]["id"] == evs[10]["unit"]["id"]
    evs[10]["occurred_at"] = "2023-11-14T22:13:21Z"  # before the unit.created of seq 4
    return [orjson.dumps(e) for e in evs]


def _skews(tmp_path: Path, *args: str) -> list[tuple[str, str]]:
    from exporter.cli import main

    out = tmp_path / "r.html"
    assert main(["replay", "--summary", "--report", str(out), *args]) == 0
    return re.findall(r'data-kind="clock skew"><td>clock skew</td><td><code>([^<]*)</code>'
                      r"</td><td><code>(\d+)</code>", out.read_text(encoding="utf-8"))


def test_a_skew_that_waited_names_its_own_file(tmp_path: Path) -> None:
    """A workload's log in two files: seq 11 waits in the first for seq 10, which comes in the
    second. The skew is found while the second file is read, but its line is the first's."""
    ev = _skewing_events()
    (tmp_path / "a.jsonl").write_bytes(b"\n".join([*ev[:9], ev[10]]) + b"\n")  # 11 at line 10
    (tmp_path / "b.jsonl").write_bytes(b"\n".join([ev[9], ev[11]]) + b"\n")
    assert _skews(tmp_path, "--workload", "w", str(tmp_path / "a.jsonl"),
                  str(tmp_path / "b.jsonl")) == [("a.jsonl:10", "11")]


def test_another_workloads_waiting_line_does_not_locate_a_skew(tmp_path: Path) -> None:
    """Workload x's seq 11 waited at its line 10; workload y's seq 11 is read in order at its
    line 11: each skew names its own file and line."""
    ev = _skewing_events()
    (tmp_path / "x.jsonl").write_bytes(b"\n".join([*ev[:9], ev[10], ev[9], ev[11]]) + b"\n")
    (tmp_path / "y.jsonl").write_bytes(b"\n".join(ev) + b"\n")
    assert _skews(tmp_path, str(tmp_path / "x.jsonl"), str(tmp_path / "y.jsonl")) == [
        ("x.jsonl:10", "11"), ("y.jsonl:11", "11")]
