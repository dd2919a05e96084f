"""Replay's output is byte-identical to the golden files made before the replay fast path, and
`replay --report`'s HTML to the one made before the report's recording path took `offer_many`.

The inputs (tests/data/replay_golden, made by its make.py) carry every anomaly replay handles:
reordered windows, redelivered lines, gaps, non-JSON lines, schema failures, pings, blank lines.
Only the build_info line is masked (its version and Python version are the machine's).
"""

from __future__ import annotations

import gzip
import re

import pytest

from exporter.cli import main
from tests.data.replay_golden.make import HERE, OUTPUTS, REPORT, inputs

_BUILD = re.compile(rb'^zaroz_exporter_build_info\{.*\} 1$', re.M)
_REPORT_VERSION = re.compile(rb"<span>exporter [^<]*</span>")


def _masked(body: bytes) -> bytes:
    return _BUILD.sub(b"zaroz_exporter_build_info{...} 1", body)


def _report_masked(html: bytes) -> bytes:
    """The report less its header's exporter version."""
    return _REPORT_VERSION.sub(b"<span>exporter ...</span>", html, count=1)


@pytest.mark.parametrize(("name", "args"), OUTPUTS, ids=[n for n, _ in OUTPUTS])
def test_replay_output_is_byte_identical_to_the_golden(name, args, capsysbinary):
    assert main(["replay", *args, *map(str, inputs())]) == 0
    got = capsysbinary.readouterr().out
    want = (HERE / name).read_bytes()
    assert len(want) > 500
    assert _masked(got) == _masked(want)


def test_the_golden_inputs_hold_every_anomaly():
    text = (HERE / "text.prom").read_text()
    for family in ("zaroz_events_duplicate_total", "zaroz_events_gaps_total",
                   "zaroz_events_clock_skew_total", "zaroz_webhook_pings_total"):
        values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith(family + "{")]
        assert sum(values) > 0, family
    for reason in ("json", "schema"):
        assert re.search(rf'zaroz_events_invalid_total\{{workload="wl-a",reason="{reason}"\}} '
                         r"[1-9]", text), reason


def test_a_different_replay_fails_the_comparison(capsysbinary, tmp_path):
    """The comparison can fail: one event fewer changes the bytes."""
    import gzip

    src = inputs()[0]
    lines = gzip.decompress(src.read_bytes()).splitlines(keepends=True)
    cut = tmp_path / src.name
    cut.write_bytes(gzip.compress(b"".join(lines[:-1])))
    assert main(["replay", str(cut), str(inputs()[1])]) == 0
    assert _masked(capsysbinary.readouterr().out) != _masked((HERE / "text.prom").read_bytes())


def _report(tmp_path, paths) -> bytes:
    out = tmp_path / "report.html"
    assert main(["replay", "--report", str(out), *map(str, paths)]) == 0
    return out.read_bytes()


def test_report_is_byte_identical_to_the_golden(tmp_path, capsysbinary):
    """Every anomaly of the inputs is in the report with its file and line (skews of events
    that waited behind a gap included): the recording path's cursor must place each one."""
    want = gzip.decompress((HERE / REPORT).read_bytes())
    for kind in (b"duplicate", b"gap", b"invalid", b"clock skew"):
        assert want.count(b'data-kind="' + kind + b'"') > 10, kind
    got = _report(tmp_path, inputs())
    assert _report_masked(got) == _report_masked(want)
    assert capsysbinary.readouterr().out.startswith(b"# HELP")


def test_a_different_report_fails_the_comparison(tmp_path, capsysbinary):
    """The comparison can fail: a blank line added at the top moves every located anomaly."""
    src = inputs()[0]
    moved = tmp_path / src.name
    moved.write_bytes(gzip.compress(b"\n" + gzip.decompress(src.read_bytes())))
    got = _report(tmp_path, [moved, inputs()[1]])
    want = gzip.decompress((HERE / REPORT).read_bytes())
    assert _report_masked(got) != _report_masked(want)
    assert got.count(b'data-kind="') == want.count(b'data-kind="')  # the same rows, moved


def test_every_clock_skew_names_the_line_of_its_event(tmp_path, capsysbinary):
    """A skew is found when its event is applied, often long after the line was read (it waited
    behind a gap, in these inputs until the end of input gives the gap up): it still names the
    file and line its event was read from."""
    import orjson

    html = _report(tmp_path, inputs()).decode()
    texts = {p.name: gzip.decompress(p.read_bytes()).splitlines() for p in inputs()}
    skews = re.findall(r'data-kind="clock skew"><td>clock skew</td><td><code>([^<]*):(\d+)'
                       r"</code></td><td><code>(\d+)</code>", html)
    assert len(skews) > 50
    for file, line, seq in skews:
        assert file in texts, (file, line, seq)
        assert orjson.loads(texts[file][int(line) - 1])["seq"] == int(seq), (file, line, seq)


def test_every_invalid_event_names_the_line_it_was_read_from(tmp_path, capsysbinary):
    """An event failing the schema that still holds its seq is counted when applied, which may
    be after it waited behind a gap (until a later line fills it, or the end of input gives it
    up): it names the file and line it was read from, and its seq."""
    import orjson

    html = _report(tmp_path, inputs()).decode()
    texts = {p.name: gzip.decompress(p.read_bytes()).splitlines() for p in inputs()}
    rows = re.findall(r'data-kind="invalid"><td>invalid</td><td><code>([^<]*)</code></td>'
                      r"<td><code>([^<]*)</code></td><td>fails the schema", html)
    with_seq = [(where, seq) for where, seq in rows if seq != "–"]
    assert len(with_seq) > 50
    for where, seq in with_seq:
        file, _, line = where.rpartition(":")
        assert file in texts, (where, seq)
        assert orjson.loads(texts[file][int(line) - 1])["seq"] == int(seq), (where, seq)


def test_an_anomaly_found_at_the_end_of_input_names_no_line(tmp_path, capsysbinary):
    """Gaps given up when the input ends were read from no line: the report says where, and no
    line number (`:0` read as a line of a file called "(end of input)")."""
    html = _report(tmp_path, inputs())
    assert html.count(b'data-kind="gap"><td>gap</td><td><code>(end of input)</code>') > 10
    assert b"(end of input):" not in html
