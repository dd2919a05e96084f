"""JSONL event logs on disk: one envelope a line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson

NOT_JSON = object()


def workload_of(path: Path) -> str:
    name = path.name
    return name[: -len(".jsonl")] if name.endswith(".jsonl") else path.stem


def read_batches(path: Path | str, size: int = 32) -> Iterator[list[object]]:
    """Decoded lines of a JSONL file in batches (a generator step per line costs as much as the
    decode); `NOT_JSON` stands for a line that does not parse. Blank lines are skipped."""
    loads = orjson.loads
    error = orjson.JSONDecodeError
    with open(path, "rb") as f:
        while True:
            lines = f.readlines(size * 256)
            if not lines:
                return
            batch: list[object] = []
            append = batch.append
            for line in lines:
                try:
                    append(loads(line))
                except error:
                    if not line.isspace():
                        append(NOT_JSON)
            yield batch
