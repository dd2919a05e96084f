"""JSONL event logs on disk: one envelope a line, plain or gzip-compressed, or on stdin."""

from __future__ import annotations

import contextlib
import gzip
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import orjson

NOT_JSON = object()
STDIN = "-"
SUFFIXES = (".jsonl", ".jsonl.gz")
_GZIP_MAGIC = b"\x1f\x8b"


class LogNotFound(Exception):
    """A replay argument that names no readable log (the message says which and why)."""


def workload_of(path: Path) -> str:
    name = path.name
    for suffix in (".jsonl.gz", ".jsonl", ".gz"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


@dataclass(frozen=True)
class LogFile:
    """One log to replay: a path, or stdin (`-`)."""

    path: Path | None  # None: stdin
    workload: str

    @property
    def name(self) -> str:
        return "<stdin>" if self.path is None else str(self.path)

    @property
    def short_name(self) -> str:
        """The file name without its directory (the report's)."""
        return "<stdin>" if self.path is None else self.path.name


def expand(args: Sequence[str], stdin_workload: str = "stdin") -> list[LogFile]:
    """Replay arguments -> logs: a file as is (plain or gzip), every `*.jsonl` and `*.jsonl.gz`
    directly inside a directory (sorted by name), `-` for stdin. Raises LogNotFound."""
    out: list[LogFile] = []
    for a in args:
        if a == STDIN:
            out.append(LogFile(None, stdin_workload))
            continue
        p = Path(a)
        if p.is_dir():
            found = sorted(c for c in p.iterdir() if c.name.endswith(SUFFIXES) and c.is_file())
            if not found:
                raise LogNotFound(f"{a}: directory holds no *.jsonl or *.jsonl.gz file")
            out.extend(LogFile(c, workload_of(c)) for c in found)
        elif p.is_file():
            out.append(LogFile(p, workload_of(p)))
        else:
            raise LogNotFound(f"{a}: no such file or directory")
    return out


class Lines(Protocol):
    """What the readers take of a log (plain or gzip): its lines, in batches or one by one."""

    def readlines(self, hint: int = -1, /) -> list[bytes]: ...
    def __iter__(self) -> Iterator[bytes]: ...


@contextlib.contextmanager
def open_log(log: LogFile | Path | str) -> Iterator[Lines]:
    """The log's bytes, decompressed when they start with the gzip magic (any name)."""
    if isinstance(log, LogFile):
        raw: IO[bytes] = sys.stdin.buffer if log.path is None else open(log.path, "rb")  # noqa: SIM115
    else:
        raw = open(log, "rb")  # noqa: SIM115
    try:
        peek = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
        if peek == _GZIP_MAGIC:
            with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                yield gz
        else:
            yield raw
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()


def read_batches(path: LogFile | Path | str, size: int = 32) -> Iterator[list[object]]:
    """Decoded lines of a JSONL log in batches (a generator step per line costs as much as the
    decode); `NOT_JSON` stands for a line that does not parse. Blank lines are skipped."""
    loads = orjson.loads
    error = orjson.JSONDecodeError
    with open_log(path) as f:
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


def read_numbered(path: LogFile | Path | str) -> Iterator[tuple[int, object, str]]:
    """(line number, decoded line or NOT_JSON, the decoder's message) for each non-blank line:
    the slow path `replay --explain` takes to say where each bad line is."""
    with open_log(path) as f:
        for n, line in enumerate(f, 1):
            try:
                yield n, orjson.loads(line), ""
            except orjson.JSONDecodeError as e:
                if not line.isspace():
                    yield n, NOT_JSON, str(e)
