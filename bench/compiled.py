"""What compiling the hot paths with mypyc would buy: the same code pure and compiled, side by side.

Compiling the model's hot modules with mypyc was proposed to reach the watch and replay
targets. This measures that instead of guessing, without changing the product: the
`exporter` package is copied into bench/out, a set of its modules is compiled there with mypyc
(the copy only: the repository's `exporter/` stays pure Python), and child processes of the same
interpreter take turns on the same work:

- `pure`: the repository's own `exporter/`;
- each compiled set in `SETS` (`proposed`: the four hot modules of the model; `path`: also every
  other module a watch event or a replayed line passes through).

The children are started once each and then run one round at a time in rotating order, so a slow
stretch of this noisy machine hits all of them; best and median are printed. Per round:

1. watch: a model synced (typed, `bench.cluster.local_sync`) from `--objects` UnitSignals made by
   `bench.cluster.populate` in `KubeEmulator`, then `--events` MODIFIED watch lines
   (`bench.cluster.EventSource`) through `Reflector._apply` with typed decoding
   (`bench.cluster.apply_reflector_typed`), against msgspec's typed decode of the same lines alone
   (`bench.cluster.typed_only`, the floor);
2. replay: `apply_files` over `bench.replay`'s event log, against its floor (`bench.replay
   .floor_once`: orjson + jsonschema-rs per line).

Every child gets the same objects and lines (seeded; its wall clock pinned, so nothing depends on
when it runs), and after each round reports a digest of its output: the rendered exposition and
every UnitSignal's state after the watch batch; replay's exposition (text and OpenMetrics). A
compiled child whose digest differs from the pure one's changed results: that is printed.

With `--instructions`, each child's cases are also counted in instructions under valgrind
(cachegrind), the figure the machine's load cannot move, on a smaller model and log. With
`--tests`, the project's tests of these modules run against each compiled tree.

Run: python -m bench.compiled [--objects N] [--events N] [--rounds K] [--replay-events N]
                              [--sets proposed,path] [--rebuild] [--instructions] [--tests]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from bench._common import OUT, ROOT, header, table

# Modules compiled, per set. `proposed` is the model's four hot modules; `path` adds every other
# module on the two measured paths that mypyc compiles and that still work compiled (the
# reflector, the handler, the sinks' observers and tables, the replay loop and its file reader).
PROPOSED = (
    "exporter/model/unitsignals.py",
    "exporter/model/units.py",
    "exporter/timestamps.py",
    "exporter/model/workload.py",
)
PATH = (
    "exporter/model/observations.py",
    "exporter/model/seqranges.py",
    "exporter/sources/kube/handler.py",
    "exporter/sources/kube/reflector.py",
    "exporter/wiring/unitsignals.py",
    "exporter/sinks/metrics/kube.py",
    "exporter/sinks/metrics/unitsignals.py",
    "exporter/sinks/metrics/table.py",
    "exporter/sinks/metrics/workload.py",
    "exporter/sources/files.py",
    "exporter/commands/replay.py",
)
SETS: dict[str, tuple[str, ...]] = {"proposed": PROPOSED, "path": (*PROPOSED, *PATH)}
# On the watch path too, but left out of `path`: mypyc compiles both, and then they do not work
# (msgspec.Struct classes). `probe_excluded` shows it on every run, from a tree of their own.
EXCLUDED = ("exporter/model/signal.py", "exporter/sources/kube/typed.py")
# Source changes the temp copy needs before mypyc compiles it: (module, old text, new text), each
# with why. None so far: every module above type-checks strictly already, which is what mypyc
# needs; a change here must keep the module's behaviour (the digests check that it does).
PATCHES: tuple[tuple[str, str, str], ...] = ()

PINNED_S = 1_790_000_000.0  # the children's wall clock (2026-09-21), so outputs compare bytewise
SEED = 1
TARGET_EVENTS_S = 100_000.0  # the watch target of bench.cluster
TARGET_REPLAY_RATIO = 1.3  # replay / floor, as bench.replay


# -- building ------------------------------------------------------------------------------------


def _fingerprint(modules: tuple[str, ...]) -> str:
    """Of everything the build depends on: the package's sources, the set, mypy, the interpreter."""
    import mypy.version

    h = hashlib.sha256()
    for p in sorted((ROOT / "exporter").rglob("*.py")):
        h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes())
    h.update(repr((modules, PATCHES, mypy.version.__version__, sys.version)).encode())
    return h.hexdigest()[:16]


def _mypy_config() -> str:
    """pyproject's [tool.mypy], as the temp copy's own pyproject (mypyc type-checks with it)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    lines = ["[tool.mypy]"]
    for k, v in cfg.items():
        if k != "files":
            lines.append(f"{k} = {json.dumps(v)}")
    return "\n".join(lines) + "\n"


def _mypyc(tree: Path, modules: list[str], log: IO[str]) -> bool:
    """Compile `modules` in `tree` (in place, next to their sources); True when it built."""
    res = subprocess.run([sys.executable, "-m", "mypyc", *modules], cwd=tree, stdout=log,
                         stderr=subprocess.STDOUT, text=True)
    return res.returncode == 0


def _fresh_copy(tree: Path) -> None:
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    shutil.copytree(ROOT / "exporter", tree / "exporter",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (tree / "schemas").symlink_to(ROOT / "schemas")  # where an unpacked checkout keeps them
    (tree / "pyproject.toml").write_text(_mypy_config())
    for module, old, new in PATCHES:
        path = tree / module
        text = path.read_text()
        if old not in text:
            raise SystemExit(f"bench.compiled: patch for {module} no longer applies")
        path.write_text(text.replace(old, new))


def build(name: str, modules: tuple[str, ...], rebuild: bool) -> tuple[Path, list[str], float]:
    """The temp tree with `modules` compiled, cached by fingerprint: (tree, modules that did not
    compile, build seconds; 0 when cached). A set that fails is retried module by module, and
    built from those that compile alone."""
    tree = OUT / f"mypyc-{name}-{_fingerprint(modules)}"
    done = tree / "COMPLETE"
    if done.exists() and not rebuild:
        failed = json.loads(done.read_text())["failed"]
        return tree, failed, 0.0
    t = time.perf_counter()
    _fresh_copy(tree)
    failed: list[str] = []
    with open(tree / "build.log", "w") as log:
        if not _mypyc(tree, list(modules), log):
            for m in modules:
                _fresh_copy(tree)
                if not _mypyc(tree, [m], log):
                    failed.append(m)
            _fresh_copy(tree)
            ok = [m for m in modules if m not in failed]
            if ok and not _mypyc(tree, ok, log):
                raise SystemExit(f"bench.compiled: {name}: {ok} compile alone but not together; "
                                 f"see {tree / 'build.log'}")
    shutil.rmtree(tree / "build", ignore_errors=True)  # the C sources and objects
    done.write_text(json.dumps({"failed": failed}))
    return tree, failed, time.perf_counter() - t


# -- the children --------------------------------------------------------------------------------


def _pin_clock() -> None:
    """Before the exporter is imported (its default `clock=time.time` arguments bind then)."""
    time.time = lambda: PINNED_S
    time.time_ns = lambda: int(PINNED_S * 1e9)


def _compiled_loaded() -> list[str]:
    """The exporter's modules this process runs compiled (loaded from an extension module)."""
    return sorted(n for n, m in list(sys.modules.items())
                  if n.startswith("exporter") and (getattr(m, "__file__", "") or "")
                  .endswith(".so"))  # fmt: skip


def _measure(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall, CPU) seconds of one call, after a full collection (as bench._common.timed)."""
    gc.collect()
    c = time.process_time()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little") + p)
    return h.hexdigest()[:16]


class Watch:
    """One child's model, synced, and the reflector it is fed through (bench/cluster.py's)."""

    def __init__(self, data: Path, objects: int, warm: bool = True) -> None:
        from bench.cluster import EventSource, local_sync
        from exporter.sinks.metrics.kube import KubeMetrics
        from exporter.sources.kube.reflector import Reflector
        from exporter.wiring.unitsignals import NamespaceHandler

        raws = data.read_bytes().splitlines()
        rv = int(raws.pop(0))
        page = (b'{"kind":"UnitSignalList","apiVersion":"units.zaroz.cloud/v1","metadata":'
                b'{"resourceVersion":"' + str(rv).encode() + b'"},"items":['
                + b",".join(raws) + b"]}")
        _, _, self.registry, self.model = local_sync([page])
        self.reflector = Reflector(None, NamespaceHandler(self.model, None),
                                   KubeMetrics(self.registry), clock=time.time)
        self.reflector.resource_version = str(rv)
        self.reflector.keys = set(self.model.objects)
        self.source = EventSource(raws, rv + 10, 3)
        if warm:
            self.round(objects)  # warm-up (not reported)

    def round(self, events: int) -> dict[str, Any]:
        from bench.cluster import apply_reflector_typed, typed_only

        lines = self.source.lines(events)
        floor = _measure(lambda: typed_only(lines))
        refl = _measure(lambda: apply_reflector_typed(self.reflector, lines))
        return {"run": refl, "floor": floor, "events": len(lines), "digest": self.digest()}

    def digest(self) -> str:
        from exporter.sinks.metrics.exposition import render_bytes

        states = repr(sorted((k, t.state) for k, t in self.model.objects.items())).encode()
        return _digest(render_bytes(self.registry), states)


class Replay:
    def __init__(self, events: int) -> None:
        from bench.replay import generate

        self.paths = generate(events, 3, SEED)

    def round(self) -> dict[str, Any]:
        from bench.replay import count_lines, floor_once
        from exporter.commands.replay import apply_files
        from exporter.sinks.metrics.exposition import render_bytes
        from exporter.wiring.events import Pipeline

        pipeline = Pipeline()
        replay = _measure(lambda: apply_files(pipeline, self.paths, None))
        floor = _measure(lambda: floor_once(self.paths))
        return {"run": replay, "floor": floor, "events": count_lines(self.paths),
                "digest": _digest(render_bytes(pipeline.registry),
                                  render_bytes(pipeline.registry, True))}


def _first_object(data: Path) -> bytes:
    with open(data, "rb") as f:
        f.readline()  # the resourceVersion
        return f.readline().rstrip(b"\n")


def probe(data: Path) -> None:
    """In a tree where EXCLUDED are compiled: what becomes of them (one JSON line)."""
    import msgspec

    out: dict[str, str] = {}
    obj = _first_object(data)
    try:
        from exporter.model.signal import UnitSignal

        msgspec.json.decode(obj, type=UnitSignal)
        out["exporter/model/signal.py"] = "works: decodes a UnitSignal"
    except msgspec.ValidationError as e:
        out["exporter/model/signal.py"] = ("imports, but its Structs reject every object "
                                          f"(msgspec: {e}), so every line would fall back to "
                                          "the untyped decode")
    except Exception as e:
        out["exporter/model/signal.py"] = f"import fails: {type(e).__name__}: {e}"
    try:
        from exporter.sources.kube.typed import decode_event

        ev = decode_event(b'{"type":"MODIFIED","object":' + obj + b"}")
        out["exporter/sources/kube/typed.py"] = f"works: decodes {type(ev and ev[1]).__name__}"
    except Exception as e:
        out["exporter/sources/kube/typed.py"] = f"import fails: {type(e).__name__}: {e}"
    print(json.dumps(out), flush=True)


COUNT_MODES = ("watch-setup", "watch", "watch-floor", "replay-setup", "replay", "replay-floor")


def count(mode: str, data: Path, objects: int, events: int, log: Path) -> None:
    """One case, once, for valgrind to count: `*-setup` stops where the measured call would
    start (imports, sync, lines made, pipeline built), the others make that one call after it."""
    _pin_clock()
    if mode.startswith("watch"):
        from bench.cluster import apply_reflector_typed, typed_only

        w = Watch(data, objects, warm=False)
        lines = w.source.lines(events)
        gc.collect()
        if mode == "watch":
            apply_reflector_typed(w.reflector, lines)
        elif mode == "watch-floor":
            typed_only(lines)
        return
    from bench.replay import floor_once
    from exporter.commands.replay import apply_files
    from exporter.wiring.events import Pipeline

    pipeline = Pipeline()
    gc.collect()
    if mode == "replay":
        apply_files(pipeline, [log], None)
    elif mode == "replay-floor":
        floor_once([log])


def _instructions(tree: Path, mode: str, args: argparse.Namespace, data: Path, log: Path) -> int:
    """Instructions of one `count` run under valgrind's cachegrind (no cache simulation), with
    a fixed hash seed so two runs of the same case count the same."""
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, "-P", "-m", "bench.compiled", "--count", mode, "--child",
           str(data), "--objects", str(args.count_objects),
           "--events", str(args.count_events), "--count-log", str(log)]
    res = subprocess.run(cmd, cwd=tree, env=_env(tree) | {"PYTHONHASHSEED": "0"},
                         capture_output=True, text=True)
    m = re.search(r"I\s+refs:\s+([\d,]+)", res.stderr)
    if res.returncode != 0 or m is None:
        raise SystemExit(f"bench.compiled: valgrind {mode} in {tree} failed:\n{res.stderr[-2000:]}")
    return int(m[1].replace(",", ""))


def count_log(lines: int, events: int) -> Path:
    """The first `lines` lines of the replay log's first file (the README's earlier counts)."""
    from bench.replay import generate

    src = generate(events, 3, SEED)[0]
    path = OUT / f"compiled-count-{lines}" / src.name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(src, "rb") as f:
            path.write_bytes(b"".join(f.readline() for _ in range(lines)))
    return path


def instructions(trees: dict[str, Path], args: argparse.Namespace) -> None:
    """Each child's instructions an event, setup subtracted: the figure the load cannot move."""
    log = count_log(args.count_lines, args.replay_events)
    data = make_objects(args.count_objects)
    jobs = [(name, mode) for name in trees for mode in COUNT_MODES
            if not (mode.endswith("floor") and name != "pure")]  # the floor is the same code
    t = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores
        counted = pool.map(lambda j: _instructions(trees[j[0]], j[1], args, data, log), jobs)
        counts = dict(zip(jobs, counted, strict=True))
    print(f"\ninstructions (valgrind cachegrind --cache-sim=no, PYTHONHASHSEED=0; each case once "
          f"in its own child, minus the same child stopped before the measured call; "
          f"{time.perf_counter() - t:.0f} s): watch {args.count_events:,} lines on "
          f"{args.count_objects:,} synced objects; replay {args.count_lines:,} lines of "
          f"{log.name}")
    rows = [["path", "child", "instructions", "an event", "vs pure", "/ floor"]]
    for path, n in (("watch", args.count_events), ("replay", args.count_lines)):
        floor = counts[("pure", f"{path}-floor")] - counts[("pure", f"{path}-setup")]
        pure = counts[("pure", path)] - counts[("pure", f"{path}-setup")]
        for name in trees:
            c = counts[(name, path)] - counts[(name, f"{path}-setup")]
            rows.append([path, name, f"{c / 1e6:,.1f} M", f"{c / n / 1e3:,.1f} k",
                         f"{c / pure:.2f}", f"{c / floor:.2f}"])
        rows.append([path, "floor", f"{floor / 1e6:,.1f} M", f"{floor / n / 1e3:,.1f} k", "",
                     "1.00"])
    print(table(rows))


# The tests of the compiled modules' behaviour (`--tests` runs them against each compiled tree).
MODEL_TESTS = ("test_timestamps.py", "test_unitsignals_model.py", "test_unitsignals_typed.py",
               "test_unitsignals_fast_path.py", "test_workload_offer_many.py",
               "test_replay_golden.py")
_PYTEST = ("import sys, pytest; rc = pytest.main(sys.argv[1:]); "
           "from bench.compiled import _compiled_loaded; "
           "print('COMPILED', len(_compiled_loaded())); sys.exit(int(rc))")


def run_tests(trees: dict[str, Path]) -> None:
    """The project's own tests of these modules, importing `exporter` from each compiled tree
    (pytest's `pythonpath = ["."]` overridden, so the checkout's pure modules stay behind it)."""
    print(f"\ntests against each compiled tree: {', '.join(MODEL_TESTS)}")
    for name, tree in trees.items():
        if name == "pure":
            continue
        cmd = [sys.executable, "-P", "-c", _PYTEST, "-q", "-p", "no:cacheprovider",
               "--import-mode=append", "-o", "pythonpath=", "-o", "addopts=",
               *(str(ROOT / "tests" / t) for t in MODEL_TESTS)]
        res = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True)
        out = res.stdout.splitlines()
        loaded = next((ln.split()[1] for ln in out if ln.startswith("COMPILED")), "?")
        summary = next((ln for ln in reversed(out) if " passed" in ln or " failed" in ln), "?")
        print(f"{name}: {summary.strip('= ')} ({loaded} compiled modules loaded)")
        failed: dict[str, list[str]] = {}
        test = ""
        for ln in out:  # each failing test's first error line, grouped
            if ln.startswith("_") and ln.endswith("_"):
                test = ln.strip("_ ")
            elif ln.startswith("E ") and test:
                failed.setdefault(ln[1:].strip()[:140], []).append(test)
                test = ""
        for err, tests in failed.items():
            print(f"  {len(tests)} x {err}  [{tests[0]}{', ...' if len(tests) > 1 else ''}]")


def child(data: Path, objects: int, replay_events: int) -> None:
    """Answer `watch N` and `replay` lines on stdin with one JSON line each, until EOF."""
    _pin_clock()
    import exporter.model.unitsignals

    compiled = _compiled_loaded()
    from exporter.model.signal import UnitSignal
    from exporter.sources.kube.typed import decode_event

    ev = decode_event(b'{"type":"MODIFIED","object":' + _first_object(data) + b"}")
    print(json.dumps({"from": str(Path(exporter.model.unitsignals.__file__ or "").parent),
                      "compiled_loaded": compiled,
                      "typed": ev is not None and type(ev[1]) is UnitSignal}), flush=True)
    watch: Watch | None = None
    replay: Replay | None = None
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "watch":
            watch = watch or Watch(data, objects)
            res = watch.round(int(args[0]))
        else:
            replay = replay or Replay(replay_events)
            res = replay.round()
        res["compiled"] = _compiled_loaded()
        print(json.dumps(res), flush=True)


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}"}


class Child:
    """A child process of the same interpreter importing `exporter` from `tree`."""

    def __init__(self, name: str, tree: Path, data: Path, args: argparse.Namespace) -> None:
        self.name = name
        # -P: not the working directory first on sys.path; PYTHONPATH alone decides which
        # `exporter` is imported (the temp tree's, before the checkout's bench and zaroz_sim).
        env = _env(tree)
        cmd = [sys.executable, "-P", "-m", "bench.compiled", "--child", str(data),
               "--objects", str(args.objects), "--replay-events", str(args.replay_events)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=tree)
        self.hello = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:  # JSON lines; anything else the child prints is passed on
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"bench.compiled: child {self.name} ended "
                                 f"(exit {self.proc.wait()})")
            if line.startswith("{"):
                out: dict[str, Any] = json.loads(line)
                return out
            print(f"  [{self.name}] {line.rstrip()}", flush=True)

    def ask(self, cmd: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


# -- the parent ----------------------------------------------------------------------------------


def make_objects(n: int) -> Path:
    """`n` UnitSignals as bench.cluster makes them (a pinned clock: the same bytes every run), one
    serialised object a line after the list's resourceVersion; cached in bench/out."""
    path = OUT / f"compiled-objects-{n}-seed{SEED}.jsonl"
    if not path.exists():
        from bench.cluster import NS, FakeClock, Shape, populate
        from zaroz_sim.kube.emulator import KubeEmulator

        clock = FakeClock(int(PINNED_S * NS) - 86_400 * NS, NS // 4)
        emu = KubeEmulator(seed=SEED, clock=clock)
        populate(emu, Shape(n, 20, 50, 64, SEED), clock)
        OUT.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(b"\n".join([str(emu.resource_version).encode(), *emu.store.raw.values()]))
        tmp.rename(path)
    return path


def _stats(xs: list[float]) -> tuple[float, float]:
    return min(xs), statistics.median(xs)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--objects", type=int, default=20_000, help="UnitSignals in the synced model")
    ap.add_argument("--events", type=int, default=30_000, help="watch lines per round")
    ap.add_argument("--replay-events", type=int, default=300_000, help="events in the replay log")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--sets", default=",".join(SETS), help="compiled sets, of: " + ", ".join(SETS))
    ap.add_argument("--rebuild", action="store_true", help="compile again even when cached")
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions under valgrind (a few minutes more)")
    ap.add_argument("--count-objects", type=int, default=2_000, help="objects, when counting")
    ap.add_argument("--count-events", type=int, default=5_000, help="watch lines, when counting")
    ap.add_argument("--count-lines", type=int, default=40_000, help="replay lines, when counting")
    ap.add_argument("--tests", action="store_true",
                    help="also run the model's tests against each compiled tree (~30 s)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--count", choices=COUNT_MODES, help=argparse.SUPPRESS)
    ap.add_argument("--count-log", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.count is not None:
        count(args.count, args.child, args.objects, args.events, args.count_log)
        return
    if args.child is not None:
        child(args.child, args.objects, args.replay_events)
        return
    if args.probe is not None:
        probe(args.probe)
        return

    header("compiled (mypyc)")
    import mypy.version

    trees: dict[str, Path] = {"pure": ROOT}
    for name in args.sets.split(","):
        modules = SETS[name]
        tree, failed, secs = build(name, modules, args.rebuild)
        built = "cached" if secs == 0 else f"built in {secs:.0f} s"
        print(f"{name}: {len(modules) - len(failed)}/{len(modules)} modules compiled by mypyc "
              f"{mypy.version.__version__} ({built}; {tree.relative_to(ROOT)})"
              + (f"; did not compile: {', '.join(failed)} (see build.log)" if failed else ""),
              flush=True)
        trees[name] = tree
    data = make_objects(args.objects)
    tree, failed, secs = build("excluded", EXCLUDED, args.rebuild)
    res = subprocess.run([sys.executable, "-P", "-m", "bench.compiled", "--probe", str(data)],
                         cwd=tree, env=_env(tree), capture_output=True, text=True, check=True)
    for module, what in json.loads(res.stdout.splitlines()[-1]).items():
        print(f"not in `path`: {module} compiled{' (failed)' if module in failed else ''}: {what}")
    from bench.replay import generate

    generate(args.replay_events, 3, SEED)  # cached, before any child reads it
    kids = [Child(name, tree, data, args) for name, tree in trees.items()]
    for k in kids:
        print(f"  {k.name}: exporter from {k.hello['from']}; compiled modules loaded: "
              f"{len(k.hello['compiled_loaded'])}", flush=True)
    if any(k.hello["compiled_loaded"] for k in kids[:1]) or not all(
            k.hello["compiled_loaded"] for k in kids[1:]):
        raise SystemExit("bench.compiled: a child did not import the tree it was given")
    if not all(k.hello["typed"] for k in kids):
        raise SystemExit("bench.compiled: a child does not decode watch lines typed: "
                         + ", ".join(k.name for k in kids if not k.hello["typed"]))
    results: dict[str, dict[str, list[dict[str, Any]]]] = {k.name: {"watch": [], "replay": []}
                                                          for k in kids}
    try:
        for r in range(args.rounds):
            order = kids[r % len(kids):] + kids[:r % len(kids)]
            for what, cmd in (("watch", f"watch {args.events}"), ("replay", "replay")):
                for k in order:
                    results[k.name][what].append(k.ask(cmd))
            print(f"  round {r + 1}/{args.rounds} done", flush=True)
    finally:
        for k in kids:
            k.close()
    report(results, args)
    for k in kids:
        used = sorted({m for rs in results[k.name].values() for x in rs for m in x["compiled"]})
        print(f"{k.name}: {len(used)} compiled modules in use" + (f": {', '.join(used)}"
                                                                  if used else ""))
    if args.instructions:
        instructions(trees, args)
    if args.tests:
        run_tests(trees)
    rs = results["pure"]["watch"]
    print(f"watch digests: {len({x['digest'] for x in rs})} distinct over {len(rs)} rounds of "
          "pure (each batch moves the output on); replay digests: "
          f"{len({x['digest'] for x in results['pure']['replay']})} distinct (the same log)")


def _table_of(runs: dict[str, list[dict[str, Any]]], per: str) -> list[list[str]]:
    """One row per child: wall best (median), CPU best, speedups against pure, the ratio to the
    floor (the same code in every child, so its best over all children), output vs pure."""
    def unit(x: dict[str, Any], i: int, key: str = "run") -> float:
        return float(x[key][i] / x["events"])  # seconds an event

    floor_w = min(unit(x, 0, "floor") for rs in runs.values() for x in rs)
    floor_c = min(unit(x, 1, "floor") for rs in runs.values() for x in rs)
    pure_w = min(unit(x, 0) for x in runs["pure"])
    pure_c = min(unit(x, 1) for x in runs["pure"])
    rows = [["child", f"wall µs/{per} best (med)", "events/s best", "CPU µs best",
             "speedup wall / CPU", "/ floor wall / CPU", "output vs pure"]]
    for name, rs in runs.items():
        w = sorted(unit(x, 0) for x in rs)
        c = min(unit(x, 1) for x in rs)
        same = [a["digest"] == b["digest"] for a, b in zip(rs, runs["pure"], strict=True)]
        rows.append([name, f"{w[0] * 1e6:.2f} ({statistics.median(w) * 1e6:.2f})",
                     f"{1 / w[0]:,.0f}", f"{c * 1e6:.2f}",
                     f"{pure_w / w[0]:.2f}x / {pure_c / c:.2f}x",
                     f"{w[0] / floor_w:.2f} / {c / floor_c:.2f}",
                     "identical" if all(same) else
                     f"DIFFERS in {same.count(False)}/{len(same)} rounds"])
    rows.append(["floor", f"{floor_w * 1e6:.2f}", f"{1 / floor_w:,.0f}", f"{floor_c * 1e6:.2f}",
                 "", "1.00 / 1.00", ""])
    return rows


def report(results: dict[str, dict[str, list[dict[str, Any]]]], args: argparse.Namespace) -> None:
    watch = {name: r["watch"] for name, r in results.items()}
    print(f"\nwatch: {args.objects:,} UnitSignals synced, {args.events:,} MODIFIED lines a round "
          f"through Reflector._apply (typed); floor: msgspec typed decode of the same lines "
          f"(bench.cluster.typed_only); {args.rounds} rounds, children interleaved")
    print(table(_table_of(watch, "event")))
    best = max(x["events"] / x["run"][0] for rs in watch.values() for x in rs)
    print(f"target >= {TARGET_EVENTS_S:,.0f} events/s: best round of any child {best:,.0f}/s "
          f"({'OK' if best >= TARGET_EVENTS_S else 'NOT REACHED'})")
    replay = {name: r["replay"] for name, r in results.items()}
    print(f"\nreplay: {replay['pure'][0]['events']:,} events (bench.replay's log) through "
          "apply_files; floor: orjson.loads + is_valid_event per line (bench.replay.floor_once)")
    print(table(_table_of(replay, "event")))
    print(f"target replay / floor <= {TARGET_REPLAY_RATIO:g}")


if __name__ == "__main__":
    main()
