"""Regenerates the replay golden input and outputs (run from the repository root, only when the
exporter's output is meant to change; the test compares replay's bytes with these files).

    python -m tests.data.replay_golden.make

The input is two simulated workloads (seeded) with every kind of anomaly added deterministically:
reordered windows, redelivered lines, lost seqs (gaps), lines that are not JSON, events that fail
the schema, pings, blank lines.
"""

from __future__ import annotations

import gzip
import random
import subprocess
import sys
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
# (file name, extra replay arguments) of each golden output
OUTPUTS = (
    ("text.prom", ()),
    ("openmetrics.txt", ("--format", "openmetrics")),
    ("summary.txt", ("--summary",)),
)
REPORT = "report.html.gz"  # `replay --report`'s HTML of the same inputs, gzipped


def inputs() -> list[Path]:
    return [HERE / "wl-a.jsonl.gz", HERE / "wl-b.jsonl.gz"]


def make_inputs() -> None:
    from tests.simlogs import finite_logs  # the simulator only when regenerating

    logs, _ = finite_logs(seed=23, workloads=2, seconds=900, rate=0.5)
    rnd = random.Random(23)
    for (_, evs), path in zip(sorted(logs.items()), inputs(), strict=True):
        lines = [orjson.dumps(e) for e in evs]
        out: list[bytes] = []
        i = 0
        while i < len(lines):
            r = rnd.random()
            if r < 0.01 and i + 5 < len(lines):  # a reordered window
                window = lines[i : i + 5]
                rnd.shuffle(window)
                out.extend(window)
                i += 5
                continue
            if r < 0.015:
                out.append(lines[i])
                out.append(lines[i])  # redelivered
            elif r < 0.018:
                pass  # lost: a gap
            elif r < 0.020:
                out.append(b"{not json")
                out.append(lines[i])
            elif r < 0.023:
                bad = orjson.loads(lines[i])
                bad.pop("id")  # fails the schema, keeps its seq
                out.append(orjson.dumps(bad))
            elif r < 0.025:
                out.append(b"")
                out.append(lines[i])
            elif r < 0.027:
                ping = orjson.loads(lines[i]) | {"type": "webhook.ping", "unit": None, "data": {}}
                out.append(orjson.dumps(ping))
                out.append(lines[i])
            else:
                out.append(lines[i])
            i += 1
        body = b"\n".join(out) + b"\n"
        if path.suffix == ".gz":
            path.write_bytes(gzip.compress(body, mtime=0))
        else:
            path.write_bytes(body)


def replay(args: tuple[str, ...]) -> bytes:
    cmd = [sys.executable, "-m", "exporter.cli", "replay", *args, *map(str, inputs())]
    return subprocess.run(cmd, capture_output=True, check=True).stdout


def report(out: Path) -> bytes:
    """The HTML `replay --report out` writes for the inputs (its stdout is the exposition)."""
    replay(("--report", str(out)))
    return out.read_bytes()


def main() -> None:
    import tempfile

    make_inputs()
    for name, args in OUTPUTS:
        (HERE / name).write_bytes(replay(args))
    with tempfile.TemporaryDirectory() as d:
        (HERE / REPORT).write_bytes(gzip.compress(report(Path(d) / "report.html"), mtime=0))


if __name__ == "__main__":
    main()
