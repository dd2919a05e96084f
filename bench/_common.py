"""Helpers shared by the benchmarks: interleaved repetition, memory readings, tables.

The benchmark machine is small and noisy, so every figure is a best-of-K where the compared
alternatives take turns within each round (a slow stretch of the machine hits both sides).
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"  # git-ignored
_random = random.SystemRandom()  # not a seeded stream: two processes pick apart


async def obey(conn: Connection, handle: Callable[[object], bool]) -> None:
    """A bench child's command loop on its event loop: each message the parent sends goes to
    `handle` (False: stop), until then or until the parent is gone."""
    done = asyncio.Event()

    def on_command() -> None:
        try:
            cmd = conn.recv()
        except (EOFError, OSError):  # the bench is gone: stop too
            done.set()
            return
        if not handle(cmd):
            done.set()

    loop = asyncio.get_running_loop()
    loop.add_reader(conn.fileno(), on_command)
    try:
        await done.wait()
    finally:
        loop.remove_reader(conn.fileno())


def checkout(rev: str) -> Path:
    """The tree of a git revision, unpacked under OUT once (`git archive`): an earlier
    revision's code to run beside this one."""
    sha = subprocess.run(["git", "rev-parse", "--short", rev], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.strip()
    tree = OUT / f"rev-{sha}"
    if not (tree / "bench" / "cluster.py").exists():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha], capture_output=True, check=True,
                                 cwd=ROOT).stdout
        tar = OUT / f"rev-{sha}.tar"
        tar.write_bytes(archive)
        with tarfile.open(tar) as t:
            t.extractall(tree, filter="data")
        tar.unlink()
    return tree


def child_env() -> dict[str, str]:
    """Environment for child Pythons: the checkout importable even when it is not installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call, after a full collection so earlier garbage is not billed."""
    gc.collect()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def interleaved(cases: dict[str, Callable[[], float]], repeat: int) -> dict[str, list[float]]:
    """Run every case once per round, rotating the order, `repeat` rounds; each returns seconds."""
    names = list(cases)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeat):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(cases[name]())
    return out


def proc_status_kib(field: str, pid: int | str = "self") -> int:
    """A /proc/<pid>/status figure (VmRSS, VmHWM) in KiB; 0 where there is no procfs."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def reset_peak_rss(pid: int | str = "self") -> bool:
    """Reset VmHWM to the current RSS (Linux clear_refs 5), so a later peak is this step's own."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.1f} MiB"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def spread(xs: Sequence[float]) -> str:
    """best (median, worst) of a list of seconds."""
    s = sorted(xs)
    return f"{ms(s[0])} (med {ms(s[len(s) // 2])}, max {ms(s[-1])})"


def table(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns; the first row is the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def header(title: str) -> None:
    cpus = len(os.sched_getaffinity(0))
    print(f"== {title}  (python {sys.version.split()[0]}, nproc {cpus})", flush=True)


def _ephemeral_floor() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A port nothing listens on, from below the kernel's ephemeral range. bind(0) hands out a
    port of that range, which any outgoing connection (the suite makes thousands) may take as
    its local port before the process meant to listen there binds it; then that process
    cannot start. Below the range, only another listener can take it."""
    floor = _ephemeral_floor()
    for _ in range(200):
        port = _random.randrange(max(1024, floor - 20_000), floor)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # every try taken: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
