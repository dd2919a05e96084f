"""A production-shaped fleet: long-lived units, a steady event rate, two exporters side by side.

For each `--workloads` count: a route process (zaroz_sim.fleet: `--units` long-lived units whose
backlog is made on demand, then `--rate` events/s of allocations, acks, busy/idle, accepting
toggles, drains ending in unit.destroyed and new units arriving) and two `zaroz-exporter serve`
processes tailing it, one with `--state-dir` (a temp dir) and one without. Once both have caught
up and hold every unit, the live stream starts and for `--seconds` each exporter is scraped by two
scrapers (every 2 s and every 3.1 s, as two Prometheus replicas with different intervals) while
its `/healthz` is timed every 0.1 s. Then each is restarted (the state one after SIGTERM and after
SIGKILL, `--restarts` times) and timed until `/readyz` answers 200 and its model holds the units
again. `--baseline REV` adds a third state exporter running an earlier revision's code (df14e4e:
version 3's SQLite store), started after the window; the state exporters' SIGKILL restarts take
turns, so the two stores' restarts meet the same machine.

Printed per configuration: scrape median and max, worst and p99 /healthz, checkpoint writes and
bytes per minute (the exporter's own checkpoint metrics, and what the process wrote to the disk,
/proc/<pid>/io write_bytes), the state dir's size, RSS after the window, and restart-to-ready.
Every request loop is bounded in count and time; loopback only; every process is stopped.

    python -m bench.fleet                                      # 100k units, 100 and 1,000 wl
    python -m bench.fleet --units 10000 --workloads 100 --seconds 20   # small, while developing
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp

from bench._common import ROOT, checkout, child_env, free_port, header, obey, proc_status_kib, table

MAIN = "import sys; from exporter.cli import main; sys.exit(main())"
# Prometheus 2.x's scrape Accept header (text or OpenMetrics, never protobuf) and gzip.
ACCEPT = {"Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
          "Accept-Encoding": "gzip"}
TRACKED = "zaroz_workload_units_tracked"
SAVES = 'zaroz_checkpoint_saves_total{result="written"}'
_NS = 1_000_000_000


# -- the route process -----------------------------------------------------------------------------


def route_process(conn: Connection, workloads: int, units: int, rate: float, seed: int,
                  interval: float) -> None:
    """Entry point of the route's process (multiprocessing, spawn)."""
    asyncio.run(_route_main(conn, workloads, units, rate, seed, interval))


async def _route_main(conn: Connection, workloads: int, units: int, rate: float, seed: int,
                      interval: float) -> None:
    """Serve the fleet; obey the parent: `live` (start the stream), `stats`, `stop`."""
    from zaroz_sim.fleet import FleetShape, LiveFleet, append_all, fleet_route

    shape = FleetShape(workloads, units, time.time_ns(), seed)
    server, backlog = fleet_route(shape)
    live = LiveFleet(backlog, rate, seed)
    url = await server.start("127.0.0.1", 0)
    conn.send(("ready", url, shape.backlog_events()))
    feeding: list[asyncio.Task[None]] = []

    async def feed() -> None:
        while True:
            append_all(server, live.tick(time.time_ns()).items())
            await asyncio.sleep(interval)

    def handle(cmd: object) -> bool:
        if cmd == "live" and not feeding:
            feeding.append(asyncio.get_running_loop().create_task(feed()))
            conn.send("ok")
        elif cmd == "stats":
            conn.send({"emitted": live.emitted, "tracked": live.units_tracked(),
                       "requests": sum(server.requests.values()), "cpu": time.process_time()})
        elif cmd == "stop":
            return False
        return True

    try:
        await obey(conn, handle)
    finally:
        for task in feeding:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await server.stop()


class Route:
    """The parent's handle on the route process."""

    def __init__(self, workloads: int, units: int, rate: float, seed: int) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=route_process,
                                args=(child, workloads, units, rate, seed, 0.1), daemon=True)
        self.proc.start()
        if not self.conn.poll(120):
            raise RuntimeError("the route process did not start")
        _, self.url, self.backlog_events = self.conn.recv()

    async def ask(self, cmd: str) -> Any:
        self.conn.send(cmd)
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, self.conn.poll, 30):
            raise RuntimeError(f"the route process did not answer {cmd!r}")
        return self.conn.recv()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send("stop")
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


# -- the exporters ---------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the bench dies (Linux prctl PR_SET_PDEATHSIG),
    so no exporter outlives an interrupted run."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


@dataclass
class Exporter:
    """One `serve` process; `start()` again after it stopped is a restart on the same port."""

    name: str
    events_url: str
    state_dir: Path | None
    log_path: Path
    extra: list[str]
    tree: Path = ROOT  # the code it runs: this checkout, or an earlier revision's (--baseline)
    port: int = field(default_factory=free_port)
    proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        args = ["serve", "--events-url", self.events_url, "--listen", f"127.0.0.1:{self.port}",
                "--kube", "off", "--log-level", "warning", *self.extra]
        if self.state_dir is not None:
            args += ["--state-dir", str(self.state_dir)]
        # Bytecode kept between starts (the image's pip compiles it at install): without it
        # (PYTHONDONTWRITEBYTECODE, a checkout never compiled) every restart compiles the whole
        # exporter first, most of its time to ready. The first start, not timed, writes it.
        env = child_env()
        if self.tree != ROOT:
            env["PYTHONPATH"] = str(self.tree)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(self.log_path.parent / "pycache")
        with open(self.log_path, "ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", MAIN, *args, cwd=self.tree, env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=log,
                preexec_fn=_die_with_parent)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 120.0) -> float:
        """Signal it and wait for it to end (SIGKILL after `timeout`); seconds it took."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return 0.0
        t = time.perf_counter()
        proc.send_signal(sig)
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        return time.perf_counter() - t

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


def metric_sum(text: str, name: str) -> float | None:
    """Sum of a family's samples (`name{` or `name `) in a text exposition; None when absent."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def sample(text: str, series: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def byte_counters(text: str) -> dict[str, float]:
    """Any counter of bytes the checkpoint reports having written (a later design may add one)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("zaroz_checkpoint_") and "bytes" in line.split(" ", 1)[0] \
                and line.split("{", 1)[0].split(" ", 1)[0].endswith("_total"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


async def get_text(session: aiohttp.ClientSession, url: str, timeout: float = 60.0) -> str:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
        r.raise_for_status()
        return await r.text()


async def wait_ready(session: aiohttp.ClientSession, exp: Exporter, units: int,
                     timeout: float) -> float:
    """Seconds from now until a /readyz 200 after which `/metrics` shows the model tracking at
    least `units` units."""
    t0 = time.perf_counter()
    deadline = t0 + timeout
    for _ in range(int(timeout / 0.05) + 1):  # bounded in count and in time
        if time.perf_counter() >= deadline:
            break
        if not exp.alive():
            raise RuntimeError(f"{exp.name} exited (see {exp.log_path})")
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(exp.url + "/readyz",
                                   timeout=aiohttp.ClientTimeout(total=10)) as r:
                if r.status == 200:
                    # the /readyz answer's time: the scrape that checks the units (and, with a
                    # state dir, checkpoints first) is not billed to the restart
                    ready = time.perf_counter() - t0
                    text = await get_text(session, exp.url + "/metrics")
                    if (metric_sum(text, TRACKED) or 0) >= units:
                        return ready
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{exp.name} not ready with {units} units after {timeout:.0f} s")


async def metrics_text(session: aiohttp.ClientSession, exp: Exporter) -> str:
    """A scrape for the figures; "" when refused (an exporter refuses a scrape when its
    checkpoint fails), said once on stderr."""
    try:
        return await get_text(session, exp.url + "/metrics")
    except (aiohttp.ClientError, TimeoutError) as e:
        print(f"{exp.name}: /metrics for the figures failed: {e}", file=sys.stderr)
        return ""


def state_size(state_dir: Path) -> int:
    """Bytes of the stored state as one JSON document (read from a copy beside the writer)."""
    import orjson

    from exporter.wiring.state.store import read_state

    state = read_state(state_dir)
    return 0 if state is None else len(orjson.dumps(state))


def proc_io(pid: int) -> dict[str, int]:
    try:
        with open(f"/proc/{pid}/io") as f:
            return {k: int(v) for k, v in (line.split(": ") for line in f)}
    except OSError:
        return {}


def dir_bytes(path: Path | None) -> int:
    if path is None:
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- the measured window ---------------------------------------------------------------------------


def server_timing(header: str | None) -> dict[str, float]:
    """The exporter's Server-Timing header (web/app.py: where a scrape's wait went), in s."""
    out: dict[str, float] = {}
    for part in (header or "").split(","):
        name, _, dur = part.strip().partition(";dur=")
        with contextlib.suppress(ValueError):
            out[name] = float(dur) / 1e3
    return out


async def scraper(exp: Exporter, interval: float, seconds: float, out: list[float],
                  errors: list[str], steps: list[dict[str, float]] | None = None) -> None:
    """Scrape on the slots start + k * interval for `seconds` (at most seconds/interval + 1
    scrapes); a scrape that outlasts its interval skips the slots it missed, as Prometheus does,
    so slow scrapes do not pile up back to back. `steps`: per scrape, the exporter's
    Server-Timing steps with `headers` (request to response headers) and `total` (whole)."""
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        loop = asyncio.get_running_loop()
        start = loop.time()
        due = start
        for _ in range(int(seconds / interval) + 1):
            if due > start + seconds:
                break
            await asyncio.sleep(max(0.0, due - loop.time()))
            t = time.perf_counter()
            try:
                async with session.get(exp.url + "/metrics", headers=ACCEPT,
                                       timeout=aiohttp.ClientTimeout(total=60)) as r:
                    headers = time.perf_counter() - t
                    await r.read()
                    if r.status == 200:
                        out.append(time.perf_counter() - t)
                        if steps is not None:
                            steps.append({**server_timing(r.headers.get("Server-Timing")),
                                          "headers": headers, "total": out[-1]})
                    else:
                        errors.append(f"HTTP {r.status}")
            except (aiohttp.ClientError, TimeoutError) as e:
                errors.append(type(e).__name__)
            due += interval
            late = loop.time() - due
            if late > 0:
                due += math.ceil(late / interval) * interval


async def prober(exp: Exporter, interval: float, seconds: float, out: list[float],
                 errors: list[str]) -> None:
    """/healthz every `interval` s (the next one right away when one took longer)."""
    async with aiohttp.ClientSession() as session:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        for _ in range(int(seconds / interval) + 1):
            if loop.time() >= end:
                break
            t = time.perf_counter()
            try:
                async with session.get(exp.url + "/healthz",
                                       timeout=aiohttp.ClientTimeout(total=30)) as r:
                    await r.read()
            except (aiohttp.ClientError, TimeoutError) as e:
                errors.append(type(e).__name__)
            took = time.perf_counter() - t
            out.append(took)
            await asyncio.sleep(max(0.0, interval - took))


@dataclass
class Figures:
    sync_s: float = 0.0
    scrapes: list[float] = field(default_factory=list)
    steps: list[dict[str, float]] = field(default_factory=list)  # per scrape (scraper)
    healthz: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    saves_per_min: float | None = None
    ckpt_bytes: float | None = None  # zaroz_checkpoint_bytes at the end
    counted_bytes_per_min: float | None = None  # from a *_bytes_total counter, if any
    disk_bytes_per_min: float = 0.0
    state_dir_bytes: int = 0
    rss_kib: int = 0
    hwm_kib: int = 0
    # per signal, each restart's (stop s, ready s), in the order taken
    restarts: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    disk_bytes_per_event: float | None = None  # write_bytes over the window / events streamed
    state_bytes: int = 0  # the state's size: the stored checkpoint as one JSON document


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:,.0f} ms"


def _mb(b: float | None) -> str:
    return "-" if b is None else f"{b / 1e6:,.2f} MB"


async def run_config(args: argparse.Namespace, workloads: int, work: Path) -> dict[str, Figures]:
    units = args.units
    print(f"\n-- {units:,} units over {workloads:,} workloads, {args.rate:,.0f} events/s, "
          f"{args.seconds:.0f} s window", flush=True)
    t = time.perf_counter()
    route = Route(workloads, units, args.rate, args.seed)
    print(f"route: {route.url}, backlog {route.backlog_events:,} events "
          f"(started in {time.perf_counter() - t:.1f} s)", flush=True)
    state_dir = work / f"state-{workloads}"
    state_dir.mkdir()
    exporters = {
        "with --state-dir": Exporter("with --state-dir", route.url, state_dir,
                                     work / f"serve-state-{workloads}.log", args.serve_arg),
        "without": Exporter("without", route.url, None, work / f"serve-plain-{workloads}.log",
                            args.serve_arg),
    }
    figs = {name: Figures() for name in exporters}
    try:
        async with aiohttp.ClientSession() as session:
            for exp in exporters.values():
                await exp.start()
            syncs = await asyncio.gather(*(wait_ready(session, e, units, args.timeout)
                                           for e in exporters.values()))
            for name, s in zip(exporters, syncs, strict=True):
                figs[name].sync_s = s
            print("initial sync: " + ", ".join(f"{n} {s:.1f} s" for n, s in
                                               zip(exporters, syncs, strict=True)), flush=True)
            await route.ask("live")
            await asyncio.sleep(args.warmup)
            before = {n: (await metrics_text(session, e), proc_io(e.pid),
                          time.perf_counter()) for n, e in exporters.items()}
            stats0 = await route.ask("stats")
            emitted0 = stats0["emitted"]
            t_stream = time.perf_counter()
            spy = profile(args, exporters["with --state-dir"], work, f"window-{workloads}",
                          args.seconds)
            tasks = []
            for name, exp in exporters.items():
                f = figs[name]
                for interval in args.scrape_intervals:
                    tasks.append(scraper(exp, interval, args.seconds, f.scrapes, f.errors,
                                         f.steps))
                tasks.append(prober(exp, args.healthz_interval, args.seconds, f.healthz,
                                    f.errors))
            await asyncio.gather(*tasks)
            await stop_profile(spy)
            stats = await route.ask("stats")
            streamed_s = time.perf_counter() - t_stream
            rate = (stats["emitted"] - stats0["emitted"]) / streamed_s
            for name, exp in exporters.items():
                f = figs[name]
                text = await metrics_text(session, exp)
                text0, io0, t0 = before[name]
                minutes = (time.perf_counter() - t0) / 60
                io1 = proc_io(exp.pid)
                f.disk_bytes_per_min = (io1.get("write_bytes", 0)
                                        - io0.get("write_bytes", 0)) / minutes
                s0, s1 = sample(text0, SAVES), sample(text, SAVES)
                if s0 is not None and s1 is not None:
                    f.saves_per_min = (s1 - s0) / minutes
                f.ckpt_bytes = metric_sum(text, "zaroz_checkpoint_bytes")
                c0, c1 = byte_counters(text0), byte_counters(text)
                if c1:
                    f.counted_bytes_per_min = sum(c1[k] - c0.get(k, 0) for k in c1) / minutes
                f.state_dir_bytes = dir_bytes(exp.state_dir)
                f.rss_kib = proc_status_kib("VmRSS", exp.pid)
                f.hwm_kib = proc_status_kib("VmHWM", exp.pid)
            for name, exp in exporters.items():
                f = figs[name]
                f.disk_bytes_per_event = f.disk_bytes_per_min / 60 / max(rate, 1.0)
                if exp.state_dir is not None:
                    f.state_bytes = state_size(exp.state_dir)
            print(f"window: {stats['emitted'] - emitted0:,} events streamed in "
                  f"{streamed_s:.1f} s (~{rate:,.0f}/s), {stats['tracked']:,} units live; the "
                  f"route answered {(stats['requests'] - stats0['requests']) / streamed_s:,.0f} "
                  f"requests/s on {(stats['cpu'] - stats0['cpu']) / streamed_s:.0%} of a core",
                  flush=True)
            if args.baseline:  # after the window, so that it takes no share of it
                base, base_sync = await start_baseline(session, args, route.url, units,
                                                       workloads, work)
                exporters[base.name] = base
                figs[base.name] = Figures(sync_s=base_sync)
            # Restarts, the stream still running: SIGTERM once, then --restarts rounds of
            # SIGKILL taking turns between the state exporters (a slow stretch of the machine
            # hits each), then the exporter without state re-reading the log.
            stateful = [n for n, e in exporters.items() if e.state_dir is not None]
            plan = [("with --state-dir", "SIGTERM", signal.SIGTERM)]
            plan += [(n, "SIGKILL", signal.SIGKILL) for _ in range(args.restarts)
                     for n in stateful]
            plan += [("without", "SIGTERM", signal.SIGTERM)]
            for i, (name, label, sig) in enumerate(plan):
                exp = exporters[name]
                stop_s = await exp.stop(sig)
                await exp.start()
                kind = "state" if exp.state_dir else "plain"
                spy = profile(args, exp, work, f"restart-{workloads}-{kind}-{label}-{i}", None)
                ready_s = await wait_ready(session, exp, units, args.timeout)
                await stop_profile(spy)
                figs[name].restarts.setdefault(label, []).append((stop_s, ready_s))
                print(f"restart {name} after {label}: stopped in {stop_s:.1f} s, "
                      f"ready with the units in {ready_s:.2f} s", flush=True)
    finally:
        for exp in exporters.values():
            await exp.stop(signal.SIGTERM, 30)
        route.stop()
    report(workloads, units, figs)
    return figs


async def start_baseline(session: aiohttp.ClientSession, args: argparse.Namespace,
                         route_url: str, units: int, workloads: int,
                         work: Path) -> tuple[Exporter, float]:
    """The --baseline revision's state exporter, started on a state dir of its own, ready
    with the units and a few seconds into the stream (its checkpoints behind it); its sync s."""
    tree: Path = args.baseline_tree
    exp = Exporter(f"baseline {tree.name.removeprefix('rev-')}", route_url,
                   work / f"state-base-{workloads}", work / f"serve-base-{workloads}.log",
                   args.serve_arg, tree=tree)
    assert exp.state_dir is not None
    exp.state_dir.mkdir()
    await exp.start()
    sync_s = await wait_ready(session, exp, units, args.timeout)
    print(f"{exp.name}: initial sync {sync_s:.1f} s", flush=True)
    await asyncio.sleep(args.warmup)
    return exp, sync_s


def profile(args: argparse.Namespace, exp: Exporter, work: Path, name: str,
            seconds: float | None) -> subprocess.Popen[bytes] | None:
    """With --py-spy: py-spy (--idle, 200 Hz, raw collapsed stacks) on `exp` for `seconds`
    (None: until stop_profile), into the --py-spy directory."""
    if args.py_spy is None:
        return None
    out = Path(args.py_spy) / f"{name}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(Path(sys.executable).with_name("py-spy")), "record", "--idle", "-r", "200",
           "-f", "raw", "-o", str(out), "-p", str(exp.pid)]
    if seconds is not None:
        cmd += ["-d", str(math.ceil(seconds))]
    log = open(work / f"py-spy-{name}.log", "ab")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(cmd, stdout=log, stderr=log)


async def stop_profile(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is None:
        return
    if spy.poll() is None:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it sampled and ends
    for _ in range(300):  # bounded: 30 s
        if spy.poll() is not None:
            break
        await asyncio.sleep(0.1)
    else:
        spy.kill()
        spy.wait()


def steps_report(name: str, steps: list[dict[str, float]]) -> None:
    """The scrape's wait, step by step: the median of each, then the slowest scrape's."""
    if not steps or "hop" not in steps[0]:
        return
    keys = ["prime", "take", "render", "write", "hop", "resume", "headers", "total"]
    med = {k: statistics.median(s.get(k, 0.0) for s in steps) for k in keys}
    slow = max(steps, key=lambda s: s["total"])
    print(f"{name}: where a scrape's time went (Server-Timing; headers = request to response "
          "headers, total = to the last byte)")
    print(table([["", *keys], ["median", *(_ms(med[k]) for k in keys)],
                 ["slowest", *(_ms(slow.get(k)) for k in keys)]]))


def report(workloads: int, units: int, figs: dict[str, Figures]) -> None:
    names = list(figs)
    rows = [["figure", *names]]

    def row(label: str, fn: Any) -> None:
        rows.append([label, *(fn(figs[n]) for n in names)])

    row("initial sync to ready", lambda f: f"{f.sync_s:.1f} s")
    row("scrapes (failed requests)", lambda f: f"{len(f.scrapes)} ({len(f.errors)})")
    row("scrape median / max", lambda f: f"{_ms(statistics.median(f.scrapes))} / "
        f"{_ms(max(f.scrapes))}" if f.scrapes else "-")
    row("/healthz probes, worst (p99)", lambda f: f"{len(f.healthz)}, {_ms(max(f.healthz))} "
        f"({_ms(sorted(f.healthz)[int(len(f.healthz) * 0.99)])})" if f.healthz else "-")
    row("checkpoint writes / min", lambda f: "-" if f.saves_per_min is None
        else f"{f.saves_per_min:,.1f}")
    row("checkpoint size (last)", lambda f: _mb(f.ckpt_bytes))
    row("checkpoint bytes / min (counter)", lambda f: _mb(f.counted_bytes_per_min))
    row("disk bytes written / min", lambda f: _mb(f.disk_bytes_per_min))
    row("disk bytes written / streamed event", lambda f: "-" if not f.state_bytes
        or f.disk_bytes_per_event is None else f"{f.disk_bytes_per_event:,.0f} B")
    row("state dir size at end", lambda f: _mb(f.state_dir_bytes) if f.state_dir_bytes else "-")
    row("state dir / state (one JSON document)", lambda f: "-" if not f.state_bytes else
        f"{_mb(f.state_dir_bytes)} / {_mb(f.state_bytes)} = "
        f"{f.state_dir_bytes / f.state_bytes:.2f}")
    row("RSS after the window (peak)", lambda f: "-" if not f.rss_kib else
        f"{f.rss_kib / 1024:,.0f} MiB "
        f"({f.hwm_kib / 1024:,.0f})")
    for label in ("SIGTERM", "SIGKILL"):
        row(f"restart after {label}: to ready (stop)", lambda f, lb=label: "-"
            if lb not in f.restarts else
            " / ".join(f"{ready:.2f}" for _, ready in f.restarts[lb]) + " s ("
            + " / ".join(f"{stop:.1f}" for stop, _ in f.restarts[lb]) + " s)")
    print(f"\n{units:,} units, {workloads:,} workloads")
    print(table(rows))
    for name in names:
        steps_report(name, figs[name].steps)
    st, pl = figs[names[0]], figs[names[1]]
    if st.scrapes and pl.scrapes:
        ratio = statistics.median(st.scrapes) / statistics.median(pl.scrapes)
        print(f"scrape median with --state-dir / without: {ratio:.2f}x (target <= 1.5x)")
        slow, bound = max(st.scrapes), 3 * max(pl.scrapes) + 0.05
        print(f"slowest scrape with --state-dir: {_ms(slow)}, without: {_ms(max(pl.scrapes))} "
              f"(target <= 3x the slowest without + 50 ms = {_ms(bound)})")
    if st.disk_bytes_per_event is not None:
        print(f"disk bytes written per streamed event with --state-dir: "
              f"{st.disk_bytes_per_event:,.0f} B (target <= 600 B; version 3's SQLite store: "
              "bench.checkpoint's stream, same fleet)")
    bound = 0.1 if workloads <= 100 else 0.2
    worst = max((max(f.healthz) for f in figs.values() if f.healthz), default=0.0)
    print(f"worst /healthz of both: {_ms(worst)} (target <= {_ms(bound)})", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.split("\n")[0])
    p.add_argument("--workloads", default="100,1000",
                   help="workload counts, one configuration each (default: 100,1000)")
    p.add_argument("--units", type=int, default=100_000, help="long-lived units (100000)")
    p.add_argument("--seconds", type=float, default=60.0, help="measured window, s (60)")
    p.add_argument("--rate", type=float, default=1000.0, help="live events/s (1000)")
    p.add_argument("--warmup", type=float, default=5.0,
                   help="seconds of live stream before the window (5)")
    p.add_argument("--scrape-intervals", default="2,3.1",
                   help="one scraper per interval, s (2,3.1)")
    p.add_argument("--healthz-interval", type=float, default=0.1)
    p.add_argument("--timeout", type=float, default=900.0,
                   help="longest wait for an exporter to be ready, s (900)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--serve-arg", action="append", default=[],
                   help="extra argument for both serve processes (repeat), e.g. "
                        "--serve-arg=--checkpoint-interval=10")
    p.add_argument("--restarts", type=int, default=3,
                   help="rounds of SIGKILL restarts of each state exporter, taking turns (3)")
    p.add_argument("--baseline", metavar="REV", default=None,
                   help="also a state exporter running this git revision's code (df14e4e: "
                        "the last with version 3's SQLite store), started after the window, "
                        "its restarts interleaved with this tree's")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, state)")
    p.add_argument("--py-spy", metavar="DIR", default=None,
                   help="profile the state exporter with py-spy --idle during the window and "
                        "each restart into DIR (raw collapsed stacks; needs root or ptrace)")
    args = p.parse_args(argv)
    try:
        counts = [int(x) for x in args.workloads.split(",") if x]
        args.scrape_intervals = [float(x) for x in args.scrape_intervals.split(",") if x]
    except ValueError:
        p.error("--workloads and --scrape-intervals take comma-separated numbers")
    if args.restarts < 1:
        p.error("--restarts must be >= 1")
    if args.baseline:
        args.baseline_tree = checkout(args.baseline)
    if not counts or min(counts) < 1 or args.units < max(counts):
        p.error("--workloads must be >= 1 and --units at least the largest workload count")
    header(f"fleet: {args.units:,} units, workloads {counts}, {args.rate:,.0f} events/s, "
           f"{args.seconds:.0f} s")
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    work = Path(tempfile.mkdtemp(prefix="zaroz-fleet-"))
    try:
        for n in counts:
            asyncio.run(run_config(args, n, work))
    finally:
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
