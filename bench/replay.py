"""Replay throughput against its floor: decoding and schema-checking the same lines.

`apply_files` cannot beat `orjson.loads` + `is_valid_event` on every line (both are C calls it
must make), so their time is the floor; everything above it is the lifecycle model, metrics and
Python glue. Also times the whole CLI (interpreter start, imports, replay, render) and the start-up
of `zaroz-exporter replay` on an empty file against `python -c pass`, since replay must import
lazily.

The CLI is also run three ways on the same files in the same interleaved rounds: by default
(text), with `--native-histogram-schema off`, and `--format protobuf` (the one output with native
buckets): default / off is what native buckets cost a text replay (target: at most 1.05).

Run: python -m bench.replay [--events N] [--repeat K] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from bench._common import OUT, child_env, header, interleaved, spread, table, timed
from exporter.commands.replay import EXPIRE_EVERY, apply_files, shown_native
from exporter.contract import is_valid_event
from exporter.sinks.metrics.exposition import Format
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.native import DEFAULT_NATIVE
from exporter.sources.files import NOT_JSON, LogFile, read_batches, workload_of
from exporter.wiring.events import Pipeline
from zaroz_sim.scenario import SimConfig, Simulator

NS = 1_000_000_000
TARGET_RATIO = 1.3  # replay / floor
NATIVE_TARGET = 1.05  # text replay by default / --native-histogram-schema off
# Modules replay must not import: the server, the tailer, the simulator, the python validator.
HEAVY = ("aiohttp", "exporter.web.app", "exporter.commands.serve", "exporter.sources.tailer",
         "zaroz_sim", "jsonschema")


def generate(events: int, workloads: int, seed: int) -> list[Path]:
    """Simulator JSONL logs of at least `events` lines in total, one file per workload; cached in
    bench/out because generating costs more than replaying."""
    d = OUT / f"replay-seed{seed}-w{workloads}-n{events}"
    done = d / "COMPLETE"
    if not done.exists():
        d.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        cfg = SimConfig(seed=seed, workloads=workloads, arrival_rate=2.0)
        sim = Simulator(cfg)
        files = {wl.id: open(d / f"{wl.id}.jsonl", "wb") for wl in sim.workloads}  # noqa: SIM115
        dumps, n, now = orjson.dumps, 0, cfg.start_ns

        def write(batch: dict[str, list[dict[str, object]]]) -> int:
            for wl, evs in batch.items():
                files[wl].write(b"".join(dumps(e) + b"\n" for e in evs))
            return sum(map(len, batch.values()))

        while n < events:
            now += 60 * NS
            n += write(sim.events_until(now))
        n += write(sim.finish(now))
        for f in files.values():
            f.close()
        done.write_text(f"{n}\n")
        print(f"generated {n:,} events in {time.perf_counter() - t:.1f} s -> {d}", flush=True)
    return sorted(d.glob("*.jsonl"))


def count_lines(paths: list[Path]) -> int:
    n = 0
    for p in paths:
        with open(p, "rb") as f:
            n += sum(1 for line in f if not line.isspace())
    return n


def text_pipeline() -> Pipeline:
    """The pipeline `replay` builds for its default (text) output."""
    return Pipeline(Registry(native=shown_native(Format.TEXT, False, DEFAULT_NATIVE)))


def replay_once(paths: list[Path]) -> float:
    pipeline = text_pipeline()
    return timed(lambda: apply_files(pipeline, paths, None))


def native_once(paths: list[Path]) -> float:
    """The same with native buckets computed (protobuf's path; text replay computes none)."""
    pipeline = Pipeline(Registry(native=DEFAULT_NATIVE))
    return timed(lambda: apply_files(pipeline, paths, None))


def apply_one_by_one(pipeline: Pipeline, paths: list[Path]) -> None:
    """apply_files as it was before WorkloadLog.offer_many: `offer` (or `reject_json`) per line,
    the same batches, the same expiry points."""
    for p in paths:
        log_file = LogFile(p, workload_of(p))
        log = pipeline.workload(log_file.workload)
        offer, reject = log.offer, log.reject_json
        n = 0
        for batch in read_batches(log_file):
            for obj in batch:
                if obj is NOT_JSON:
                    reject()
                else:
                    offer(obj)
            n += len(batch)
            if n >= EXPIRE_EVERY:
                n = 0
                pipeline.expire_workload(log_file.workload, log.clock)
    for name, log in pipeline.logs.items():
        log.flush()
        pipeline.expire_workload(name, log.clock)


def one_by_one_once(paths: list[Path]) -> float:
    pipeline = text_pipeline()
    return timed(lambda: apply_one_by_one(pipeline, paths))


def floor_once(paths: list[Path]) -> float:
    """The same files, opened the same way, line by line: decode and validate, nothing else."""

    def run() -> None:
        loads, valid = orjson.loads, is_valid_event
        for p in paths:
            with open(p, "rb") as f:
                for line in f:
                    valid(loads(line))

    return timed(run)


def run_cmd(cmd: list[str], cpu: list[float] | None = None) -> float:
    """Wall seconds of the command; its CPU seconds (user + system) appended to `cpu`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, env=child_env())
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return wall


def entry_point() -> tuple[str, list[str]]:
    """`zaroz-exporter` when installed, else exactly what its console script runs."""
    exe = shutil.which("zaroz-exporter")
    if exe:
        return "zaroz-exporter", [exe]
    code = "import sys; from exporter.cli import main; sys.exit(main())"
    return "zaroz-exporter (not installed: console-script equivalent)", [sys.executable, "-c", code]


def _importtime(cmd: list[str]) -> list[tuple[int, str, str]]:
    """(cumulative µs, module, importer) for each import of a child run under -X importtime."""
    env = child_env() | {"PYTHONPROFILEIMPORTTIME": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    out: list[tuple[int, str, str]] = []
    stack: list[tuple[int, int]] = []  # (depth, index in out) of imports awaiting their importer
    for line in res.stderr.splitlines():
        if line.startswith("import time:") and "[us]" not in line:
            _, cum, name = line[len("import time:") :].split("|")
            depth = (len(name) - len(name.lstrip()) - 1) // 2
            out.append((int(cum), name.strip(), ""))
            while stack and stack[-1][0] > depth:  # children are printed before their importer
                i = stack.pop()[1]
                out[i] = (out[i][0], out[i][1], name.strip())
            stack.append((depth, len(out) - 1))
    return out


def import_breakdown(cmd: list[str]) -> tuple[int, list[tuple[int, str, str]], list[str]]:
    """Import µs replay adds to a bare interpreter (site, .pth files); the heaviest modules our
    code imports directly; any module replay should not load at all."""
    bare = {name for _, name, _ in _importtime([sys.executable, "-c", "pass"])}
    ours = [x for x in _importtime(cmd) if x[1] not in bare]
    total = sum(cum for cum, _, importer in ours if not importer)
    direct = sorted(
        (x for x in ours if x[2].startswith("exporter") and not x[1].startswith("exporter")),
        reverse=True,
    )
    heavy = sorted(n for _, n, _ in ours if any(n == h or n.startswith(h + ".") for h in HEAVY))
    return total, direct, heavy


def profile_replay(paths: list[Path], top: int = 10) -> None:
    pipeline = text_pipeline()
    prof = cProfile.Profile()
    prof.runcall(apply_files, pipeline, paths, None)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    lines = buf.getvalue().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
    print(f"\ncProfile of one replay, top {top} by tottime (profiling inflates Python calls):")
    print("\n".join(ln for ln in lines[start - 2 :] if ln.strip()))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=300_000, help="events in the log (all files)")
    ap.add_argument("--workloads", type=int, default=3, help="workloads (one file each)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5, help="interleaved rounds; best is reported")
    ap.add_argument("--startup-repeat", type=int, default=10, help="rounds of the start-up check")
    ap.add_argument("--profile", action="store_true", help="also print a cProfile top 10")
    args = ap.parse_args(argv)

    header("replay")
    paths = generate(args.events, args.workloads, args.seed)
    lines = count_lines(paths)
    size = sum(p.stat().st_size for p in paths)
    print(f"log: {lines:,} lines, {size / 2**20:,.1f} MiB in {len(paths)} files; "
          f"best of {args.repeat}, interleaved", flush=True)
    floor_once(paths)  # page cache and validator warm-up
    cases: dict[str, Callable[[], float]] = {
        "replay (apply_files)": lambda: replay_once(paths),
        "  offer per line (alternative: before)": lambda: one_by_one_once(paths),
        "  with native buckets (protobuf's path)": lambda: native_once(paths),
        "floor (loads + is_valid_event)": lambda: floor_once(paths),
    }
    cpu: dict[str, list[float]] = {name: [] for name in cases}

    def with_cpu(name: str, case: Callable[[], float]) -> Callable[[], float]:
        """The case's wall time; its CPU time (this process's) kept beside it, the steadier
        figure when other work shares the cores. Not for the CLI (a child process)."""
        def run() -> float:
            c = time.process_time()
            wall = case()
            cpu[name].append(time.process_time() - c)
            return wall
        return run

    times = interleaved({n: with_cpu(n, c) for n, c in cases.items()}, args.repeat)
    floor = min(times["floor (loads + is_valid_event)"])
    floor_cpu = min(cpu["floor (loads + is_valid_event)"])
    rows = [["measure", "best time (median, max)", "events/s", "time / floor", "best CPU",
             "CPU / floor"]]
    for name, ts in times.items():
        c = f"{min(cpu[name]) * 1e3:,.1f} ms"
        cr = f"{min(cpu[name]) / floor_cpu:.2f}"
        rows.append([name, spread(ts), f"{lines / min(ts):,.0f}", f"{min(ts) / floor:.2f}", c,
                     cr])
    print(table(rows))
    ratio = min(times["replay (apply_files)"]) / floor
    verdict = "OK" if ratio <= TARGET_RATIO else "ABOVE TARGET"
    before = min(times["  offer per line (alternative: before)"]) / floor
    ratio_cpu = min(cpu["replay (apply_files)"]) / floor_cpu
    before_cpu = min(cpu["  offer per line (alternative: before)"]) / floor_cpu
    print(f"replay / floor = {ratio:.2f} (target <= {TARGET_RATIO:g}): {verdict}; offer per "
          f"line (before) / floor = {before:.2f}; in CPU time {ratio_cpu:.2f} and "
          f"{before_cpu:.2f}\n", flush=True)

    cli = [sys.executable, "-m", "exporter.cli", "replay"]
    files = [str(p) for p in paths]
    variants = {
        "replay FILES (text, default)": [*cli, *files],
        "replay --native-histogram-schema off FILES": [*cli, "--native-histogram-schema", "off",
                                                       *files],
        "replay --format protobuf FILES (native buckets)": [*cli, "--format", "protobuf",
                                                            *files],
    }
    child_cpu: dict[str, list[float]] = {n: [] for n in variants}
    wall = interleaved({n: (lambda n=n, c=c: run_cmd(c, child_cpu[n]))
                        for n, c in variants.items()}, args.repeat)
    default, off = list(variants)[:2]
    rows = [["CLI `python -m exporter.cli`", "best wall (median, max)", "wall / off",
             "best CPU", "CPU / off"]]
    for name, ts in wall.items():
        rows.append([name, spread(ts), f"{min(ts) / min(wall[off]):.2f}",
                     f"{min(child_cpu[name]):,.2f} s",
                     f"{min(child_cpu[name]) / min(child_cpu[off]):.2f}"])
    print(table(rows))
    nat = min(wall[default]) / min(wall[off])
    nat_cpu = min(child_cpu[default]) / min(child_cpu[off])
    print(f"text replay by default / --native-histogram-schema off = {nat:.2f} wall, "
          f"{nat_cpu:.2f} CPU (target <= {NATIVE_TARGET:g}): "
          f"{'OK' if min(nat, nat_cpu) <= NATIVE_TARGET else 'ABOVE TARGET'}\n", flush=True)

    empty = OUT / "empty.jsonl"
    empty.write_bytes(b"")
    label, exe = entry_point()
    starts: dict[str, Callable[[], float]] = {
        "python -c pass": lambda: run_cmd([sys.executable, "-c", "pass"]),
        f"{label} replay EMPTY": lambda: run_cmd([*exe, "replay", str(empty)]),
    }
    st = interleaved(starts, args.startup_repeat)
    base = min(st["python -c pass"])
    rows = [["start-up", "best time (median, max)", "minus python -c pass"]]
    for name, ts in st.items():
        rows.append([name, spread(ts), f"{(min(ts) - base) * 1e3:+,.1f} ms"])
    print(table(rows))
    total, direct, heavy = import_breakdown([*exe, "replay", str(empty)])
    print(f"imports beyond a bare interpreter: {total / 1e3:.1f} ms; heaviest imported by our "
          "modules (cumulative): "
          + ", ".join(f"{n} {us / 1e3:.1f} ms ({by})" for us, n, by in direct[:6]))
    print("heavy modules imported by replay: " + (", ".join(heavy) if heavy else "none"))

    if args.profile or ratio > TARGET_RATIO:
        profile_replay(paths)


if __name__ == "__main__":
    main()
