"""`zaroz-exporter state check|backup`: look after a `--state-dir` without stopping its exporter.

Both work while an exporter runs on the directory: neither takes its lock (`DIR/lock`, held by
the exporter for its whole life), and the store's own reads are consistent snapshots
(Store.verify, Store.backup, read_state).

A backup holds the store and the trace outbox's mark (`traces-acked`, outbox.py). The mark is
read after the store is copied, so it may be newer than the copied store, never older. Newer is
harmless: every serial at or below it was handled (accepted by the collector or given up), so
the restored exporter is right not to send the stored spans below it again, and it numbers new
spans above it (Outbox.restore: `max(next, mark + 1)`), so none of them is taken as handled. An
older mark would only resend spans handled in between (duplicates, never a loss), so the order
costs nothing and saves those. The spans the old process exported after the copy was taken are
rebuilt by the restored one from the events after the store's cursors and sent again, as after
any restart from a checkpoint older than the last export: duplicates with the same ids.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.sinks.traces.outbox import ACKED_FILE
from exporter.wiring.state import convert
from exporter.wiring.state.checkpoint import CONVERTED, FILE, LOCK
from exporter.wiring.state.store import DB, Store, read_state

SOUND, PROBLEMS, USAGE = 0, 1, 2
_MARK_WIDTH = 20  # as outbox.AckMark writes it
_KNOWN_KEYS = frozenset({"v", "workloads", "metrics", "traces"})
ROLES = {
    LOCK: "lock (held by the exporter running on this directory, if any)",
    ACKED_FILE: "trace outbox mark (highest span serial handled)",
    FILE: "checkpoint of version 1 or 2 (converted into the store at the next start)",
    CONVERTED: "converted checkpoint (read by nothing, may be deleted)",
}


class UsageError(Exception):
    """The command cannot run as asked (exit code 2)."""


@dataclass
class Report:
    """What `state check` found; `problems` empty: sound."""

    dir: str
    problems: list[str] = field(default_factory=list)
    in_use_by: list[int] = field(default_factory=list)  # pids holding the lock
    store: dict[str, Any] | None = None
    files: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"dir": self.dir, "sound": not self.problems, "problems": self.problems,
                "in_use_by": self.in_use_by, "store": self.store, "files": self.files}


def _directory(path: str) -> Path:
    d = Path(path)
    if not d.exists():
        raise UsageError(f"{path}: no such directory")
    if not d.is_dir():
        raise UsageError(f"{path}: not a directory")
    return d


def read_mark(state_dir: Path) -> int | None:
    """The outbox's mark, or None when there is none. The export thread rewrites it in place,
    so it is read until two reads agree: a read torn by a write is never taken."""
    path = state_dir / ACKED_FILE
    last: bytes | None = None
    for _ in range(100):
        try:
            raw = path.read_bytes()[:_MARK_WIDTH + 1].strip()
        except FileNotFoundError:
            return None
        if raw == last:
            return int(raw) if raw.isdigit() else 0  # as AckMark reads it
        last = raw
    raise OSError(f"{path}: changes at every read")


def _lock_holders(lock: Path) -> list[int]:
    """The pids holding a flock on `lock`, from /proc/locks (empty where there is none)."""
    try:
        st = lock.stat()
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in lines:
        parts = line.split()
        if len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == want:
            pids.append(int(parts[4]))
    return sorted(set(pids))


def _files(d: Path) -> Iterator[dict[str, Any]]:
    for p in sorted(d.iterdir()):
        if p.name == DB:
            role = "store (LevelDB: its log and tables)"
        elif p.name.startswith(convert.DB):
            role = ("store of version 3 (converted into the store at the next start)"
                    if not p.name.endswith(".converted") else
                    "converted store of version 3 (read by nothing, may be deleted)")
        else:
            role = ROLES.get(p.name, "not the exporter's" if p.is_file() else "a directory")
        try:
            size = (p.stat().st_size if p.is_file() else
                    sum(f.stat().st_size for f in p.iterdir() if f.is_file()) if p.name == DB
                    else None)
        except OSError:
            size = None
        yield {"name": p.name, "bytes": size, "role": role}


def _holds(state: dict[str, Any], mark: int | None, verbose: bool) -> dict[str, Any]:
    """What a checkpoint (in `read`'s form) holds, counted."""
    workloads = state["workloads"]
    per = {w: {"cursor": e["cursor"], "units": len(e["log"]["units"]),
               "pending": len(e["log"]["pending"]), "held": bool(e.get("held"))}
           for w, e in sorted(workloads.items())}
    metrics = state.get("metrics", {})
    out: dict[str, Any] = {
        "version": state["v"],
        "workloads": len(per),
        "held_workloads": sum(1 for x in per.values() if x["held"]),
        "units": sum(x["units"] for x in per.values()),
        "series": sum(len(rows) for rows in metrics.values()),
        "families": len(metrics),
        "pending_events": sum(x["pending"] for x in per.values()),
    }
    if per:
        lo = min(per, key=lambda w: per[w]["cursor"])
        hi = max(per, key=lambda w: per[w]["cursor"])
        out["cursors"] = {"min": per[lo]["cursor"], "min_workload": lo,
                          "max": per[hi]["cursor"], "max_workload": hi}
    traces = state.get("traces")
    if traces is not None:
        outbox = traces.get("outbox") or {}
        spans = [serial for serial, _ in outbox.get("spans", [])]
        out["traces"] = {
            "open": sum(len(b["units"]) for b in traces["builders"].values()),
            "spans_stored": len(spans),
            "spans_pending": sum(1 for s in spans if mark is None or s > mark),
            "next_serial": outbox.get("next"),
        }
    for key in sorted(set(state) - _KNOWN_KEYS):  # e.g. stored UnitSignal objects
        value = state[key]
        out[key] = len(value) if isinstance(value, dict | list) else value
    if verbose:
        out["per_workload"] = per
    return out


def check(state_dir: str, verbose: bool = False) -> Report:
    """Integrity, format version and contents of a state dir, without its lock."""
    d = _directory(state_dir)
    report = Report(str(d))
    report.files = list(_files(d))
    report.in_use_by = _lock_holders(d / LOCK)
    store = Store(d / DB)
    if not store.exists():
        if (d / FILE).exists():
            report.problems.append(f"no store: {FILE} of an older version is converted at the "
                                   "next start")
        return report
    report.problems += store.verify()
    try:
        mark = read_mark(d)
    except (OSError, ValueError) as e:
        report.problems.append(f"{ACKED_FILE}: {e}")
        mark = None
    if report.problems:
        return report
    state = read_state(d)
    if state is None:
        if not report.in_use_by:  # else its first save is under way, or to come
            report.problems.append(
                f"{DB} holds no checkpoint (a first save killed before it committed, or a copy "
                "without its log files): a start would begin every log again")
        return report
    report.store = _holds(state, mark, verbose)
    if mark is not None and report.store.get("traces"):
        report.store["traces"]["acked_mark"] = mark
    return report


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} B"


def human(report: Report) -> str:
    lines = [f"{report.dir}: {'sound' if not report.problems else 'PROBLEMS'}"]
    if report.in_use_by:
        lines.append(f"  in use by     pid {', '.join(map(str, report.in_use_by))} (lock held)")
    s = report.store
    if s is not None:
        lines += [
            f"  format        version {s['version']}",
            f"  workloads     {s['workloads']} ({s['held_workloads']} held until caught up)",
            f"  units         {s['units']}",
            f"  series        {s['series']} in {s['families']} families",
            f"  pending       {s['pending_events']} events waiting behind a gap",
        ]
        if "cursors" in s:
            c = s["cursors"]
            lines.append(f"  cursors       min {c['min']} ({c['min_workload']}), "
                         f"max {c['max']} ({c['max_workload']})")
        t = s.get("traces")
        if t is not None:
            lines.append(f"  traces        {t['open']} open units, {t['spans_stored']} spans "
                         f"stored, {t['spans_pending']} not yet handled by the collector "
                         f"(mark {t.get('acked_mark', 'none')})")
        for key in sorted(set(s) - {"version", "workloads", "held_workloads", "units", "series",
                                    "families", "pending_events", "cursors", "traces",
                                    "per_workload"}):
            lines.append(f"  {key:<13} {s[key]}")
        for w, x in s.get("per_workload", {}).items():
            lines.append(f"    {w}: cursor {x['cursor']}, {x['units']} units, {x['pending']} "
                         f"pending{', held' if x['held'] else ''}")
    elif not report.problems:
        lines.append("  no checkpoint (a start begins at the beginning of each log)"
                     if not report.in_use_by else
                     "  no checkpoint committed yet (the exporter's first save is to come)")
    lines.append("  files")
    for f in report.files:
        lines.append(f"    {f['name']:<28} {_mib(f['bytes']):>10}  {f['role']}")
    if report.problems:
        lines.append("  problems (restore a backup, or move the directory away and start with "
                     "--start-from head or earliest)")
        lines += [f"    {p}" for p in report.problems]
    return "\n".join(lines)


def run_check(state_dir: str, output: str, verbose: bool) -> int:
    report = check(state_dir, verbose)
    print(json.dumps(report.as_json(), indent=2) if output == "json" else human(report))
    return PROBLEMS if report.problems else SOUND


def _write_durably(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def backup(state_dir: str, dest: str) -> dict[str, Any]:
    """Copy what a restore needs from a state dir (running or not) into `dest` (empty or
    absent): the store's last commit, then the outbox's mark (see the module docstring for
    the order), and a checkpoint of an older version not converted yet. The copy is checked
    (Store.verify) before it is reported. Raises UsageError, or OSError / plyvel.Error."""
    d = _directory(state_dir)
    out = Path(dest)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{dest}: must be an empty directory or absent")
    if out.resolve() == d.resolve():
        raise UsageError(f"{dest}: is the state directory")
    store = Store(d / DB)
    if not store.exists() and (d / convert.DB).exists():
        raise UsageError(f"{state_dir}: holds a store of version 3, converted at the exporter's "
                         "next start: back it up after that start, or copy the directory while "
                         "no exporter runs")
    if not store.exists() and not (d / FILE).exists():
        raise UsageError(f"{state_dir}: holds no checkpoint to back up")
    made = not out.exists()
    copied: list[str] = []
    try:
        if store.exists():
            store.backup(out)
            copied.append(DB)
        if (d / FILE).exists():  # read only while the store holds no checkpoint
            out.mkdir(parents=True, exist_ok=True)
            _write_durably(out / FILE, (d / FILE).read_bytes())
            copied.append(FILE)
        mark = read_mark(d)  # after the store: see the module docstring
        if mark is not None:
            _write_durably(out / ACKED_FILE, f"{mark:0{_MARK_WIDTH}d}\n".encode())
            copied.append(ACKED_FILE)
        fd = os.open(out, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:  # no half copy left behind: DEST is as it was
        if out.is_dir():
            for p in out.iterdir():
                shutil.rmtree(p) if p.is_dir() else p.unlink()
            if made:
                out.rmdir()
        raise
    result = check(str(out))
    return {"dir": str(d), "dest": str(out), "files": copied, "problems": result.problems,
            "store": result.store}


def run_backup(state_dir: str, dest: str, output: str) -> int:
    result = backup(state_dir, dest)
    if output == "json":
        print(json.dumps(result, indent=2))
    else:
        s = result["store"]
        what = (f": {s['workloads']} workloads, {s['units']} units, {s['series']} series"
                if s else "")
        print(f"{result['dir']} backed up to {result['dest']} ({', '.join(result['files'])})"
              f"{what}")
        for p in result["problems"]:
            print(f"  problem in the copy: {p}")
    return PROBLEMS if result["problems"] else SOUND
