"""Checkpoints: model snapshot/restore, atomic saves at scrape time, --start-from, and a real
kill -9 and restart whose two last scrapes add up to the simulator's ground truth exactly.

Run as a script (`python -m tests.test_checkpoint ROUTE_URL STATE_DIR WORKLOAD...`), this module
is the exporter under test in the restart test: Pipeline + TailSupervisor + Checkpointer behind a
/metrics that saves the checkpoint before rendering, as `serve`'s server does.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from exporter import catalog
from exporter.commands.startfrom import prepare_start
from exporter.model.observations import Recorder
from exporter.model.workload import WorkloadLog
from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.metrics.route import RouteMetrics
from exporter.sources.backoff import Backoff
from exporter.sources.route import RouteClient
from exporter.sources.tailer import TailSupervisor
from exporter.wiring.events import Pipeline
from exporter.wiring.state.checkpoint import (
    FILE,
    Checkpointer,
    CheckpointError,
    render_checkpointed,
)
from exporter.wiring.state.convert import DB as V3_DB
from exporter.wiring.state.store import DB, Changes, Store, read_state, row_of
from tests.serving import Feed
from tests.simlogs import assert_matches_truth, finite_logs, parse
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer

LOGS, TRUTH = finite_logs(seed=9, workloads=2, seconds=240, rate=0.6)
ROOT = Path(__file__).resolve().parent.parent


# -- model snapshot/restore ----------------------------------------------------------------------


def test_snapshot_restore_continues_exactly():
    """Half a log, a snapshot through JSON, the rest into a fresh log: same observations as one
    uninterrupted log, including a seq held back behind a gap across the restart."""
    events = LOGS["wl-1"]
    cut = len(events) // 2
    held = events[cut - 5]  # arrives only after the restart: pending events cross it
    whole = Recorder()
    one = WorkloadLog(whole)
    for e in events:
        one.offer(e)
    first, second = Recorder(), Recorder()
    a = WorkloadLog(first)
    for e in events[:cut]:
        if e is not held:
            a.offer(e)
    state = orjson.loads(orjson.dumps(a.snapshot()))
    assert len(state["pending"]) == 4 and state["units"]
    b = WorkloadLog(second)
    b.restore(state)
    b.offer(held)
    for e in events[cut:]:
        b.offer(e)
    assert first.calls + second.calls == whole.calls
    assert b.snapshot() == one.snapshot()


def test_restore_refuses_unknown_version():
    with pytest.raises(ValueError):
        WorkloadLog(Recorder()).restore({"v": 99})


# -- Checkpointer ----------------------------------------------------------------------------------


def _fed(events: int) -> Pipeline:
    p = Pipeline()
    for e in LOGS["wl-1"][:events]:
        p.workload("wl-1").offer(e)
    return p


def test_save_load_and_unchanged(tmp_path: Path):
    p = _fed(300)
    cp = Checkpointer(tmp_path, p)
    assert cp.save() is True
    assert cp.save() is False  # nothing changed: nothing written
    assert not (tmp_path / (FILE + ".tmp")).exists()
    p.workload("wl-1").offer(LOGS["wl-1"][300])
    assert cp.save() is True
    cp.close()
    q = Pipeline()
    cp2 = Checkpointer(tmp_path, q)
    assert cp2.load() == 1
    assert q.logs["wl-1"].snapshot() == p.logs["wl-1"].snapshot()
    desired = q.registry["zaroz_workload_desired_units"].series[("wl-1",)].value
    assert desired == p.registry["zaroz_workload_desired_units"].series[("wl-1",)].value
    text = render_bytes(q.registry).decode()
    assert 'zaroz_checkpoint_saves_total{result="written"} 0' in text  # this process's writes
    # Every counter and histogram continues from the checkpoint.
    assert parse(text) == {k: v for k, v in parse(render_bytes(p.registry).decode()).items()
                           if not k[0].startswith("zaroz_checkpoint_")} | {
        k: v for k, v in parse(text).items() if k[0].startswith("zaroz_checkpoint_")}


def test_second_exporter_on_same_state_dir_refused(tmp_path: Path):
    Checkpointer(tmp_path, Pipeline()).save()
    with pytest.raises(CheckpointError, match="in use"):
        Checkpointer(tmp_path, Pipeline()).load()


def test_corrupt_checkpoint_refuses_to_start(tmp_path: Path):
    (tmp_path / FILE).write_bytes(b'{"v": 1, "workloads": {"wl-1": {"log": {"v": 1}}}}')
    with pytest.raises(CheckpointError, match="start-from"):
        Checkpointer(tmp_path, Pipeline()).load()
    cp = Checkpointer(tmp_path / "other", Pipeline())
    assert prepare_start("earliest", cp, None) is None  # ignores any checkpoint


def test_a_store_that_cannot_be_read_refuses_to_start(tmp_path: Path):
    (tmp_path / V3_DB).write_bytes(b"SQLite format 3\0" + b"\xff" * 2000)  # a torn, foreign file
    with pytest.raises(CheckpointError, match="start-from"):
        Checkpointer(tmp_path, Pipeline()).load()
    assert (tmp_path / V3_DB).read_bytes().startswith(b"SQLite format 3\0\xff")  # as it was


def test_a_store_whose_manifest_is_lost_refuses_to_start(tmp_path: Path):
    cp = Checkpointer(tmp_path, _fed(300))
    cp.save()
    cp.close()
    manifest = tmp_path / DB / (tmp_path / DB / "CURRENT").read_text().strip()
    manifest.write_bytes(b"\xff" * 64)
    with pytest.raises(CheckpointError, match="start-from"):
        Checkpointer(tmp_path, Pipeline()).load()
    assert manifest.read_bytes() == b"\xff" * 64  # left as it was


def test_unwritable_state_dir_fails_the_scrape(tmp_path: Path):
    (tmp_path / "file").write_text("x")
    p = _fed(10)
    with pytest.raises(CheckpointError):
        render_checkpointed(p.registry, False, Checkpointer(tmp_path / "file" / "sub", p))


def test_render_checkpointed_equals_checkpoint(tmp_path: Path):
    p = _fed(200)
    cp = Checkpointer(tmp_path, p)
    text = b"".join(render_checkpointed(p.registry, False, cp)).decode()
    saved = read_state(tmp_path)
    assert saved is not None
    assert f'zaroz_events_last_seq{{workload="wl-1"}} {saved["workloads"]["wl-1"]["cursor"]}' \
        in text


async def test_start_from_head(tmp_path: Path):
    route = RouteServer(SimConfig(workloads=1).workload_list())
    url = await route.start()
    route.append("wl-1", LOGS["wl-1"][:50])
    p = Pipeline()
    async with aiohttp.ClientSession() as s:
        client = RouteClient(s, url)
        sup = TailSupervisor(client, p, RouteMetrics(p.registry), ["wl-1"],
                             start_cursor=prepare_start("head", None, client), wait=1)
        await sup.start()
        try:
            deadline = time.monotonic() + 30  # conditions, not pauses: a busy machine is slow
            while not sup.ready() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert p.logs["wl-1"].applied_through == 50
            route.append("wl-1", LOGS["wl-1"][50:55])
            while p.logs["wl-1"].applied_through != 55 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            applied = p.registry["zaroz_events_total"].series
            assert sum(s.value for k, s in applied.items() if k[0] == "wl-1") == 5
            assert p.registry["zaroz_events_gaps_total"].series[("wl-1",)].value == 0
        finally:
            await sup.stop()
            await route.stop()


# -- kill -9 and restart ------------------------------------------------------------------------


async def _harness(route_url: str, state_dir: str, workloads: list[str]) -> None:
    from aiohttp import web

    from exporter.sinks.metrics.exposition import TEXT_TYPE
    from exporter.web.app import start_site

    pipeline = Pipeline()
    checkpointer = Checkpointer(state_dir, pipeline)
    _kill_in_commit(checkpointer, Path(state_dir))
    session = aiohttp.ClientSession()
    client = RouteClient(session, route_url)
    start_cursor = prepare_start("checkpoint", checkpointer, client)
    supervisor = TailSupervisor(
        client, pipeline, RouteMetrics(pipeline.registry), workloads,
        backoff_factory=lambda: Backoff(0.01, 0.1, rng=random.Random(0)),
        start_cursor=start_cursor, wait=1, limit=37)

    async def metrics(request: web.Request) -> web.Response:
        try:
            chunks = render_checkpointed(pipeline.registry, False, checkpointer)
        except CheckpointError as e:
            return web.Response(status=503, text=str(e))
        return web.Response(body=b"".join(chunks), headers={"Content-Type": TEXT_TYPE})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    _, url = await start_site(app, "127.0.0.1:0")
    await supervisor.start()
    print(url, flush=True)
    await asyncio.Event().wait()


KILL_NEXT_SAVE = "kill-at-next-save"  # the test puts it in the state dir; the harness obeys
KILL_IN_COMPACTION = "kill-in-compaction"  # ...or this one
KILLED = "killed-between"  # ...and leaves this behind, saying where it killed


def _live_log(store_dir: Path) -> Path:
    return max(store_dir.glob("*.log"), key=lambda f: int(f.stem))


def _kill_in_commit(checkpointer: Checkpointer, state_dir: Path) -> None:
    """Test-only: once KILL_NEXT_SAVE exists, the next checkpoint's batch is appended, then the
    log is cut in the middle of it (what a kill or a power cut leaves of an append the disk
    had not finished), and the process is SIGKILLed before the save returns. Once
    KILL_IN_COMPACTION exists, the next checkpoint is committed, then LevelDB compacts the
    whole store in its own thread and the process is SIGKILLed as soon as the compaction has
    begun writing its first table."""
    store = checkpointer.store
    append = store._append

    def commit(batch: object) -> None:
        if (state_dir / KILL_NEXT_SAVE).exists():
            log = _live_log(store.path)
            before = log.stat().st_size
            append(batch)
            after = log.stat().st_size
            os.truncate(log, before + (after - before) // 2)
            (state_dir / KILLED).write_text(f"{after - before} {(after - before) // 2}")
            os.kill(os.getpid(), signal.SIGKILL)
        append(batch)
        if (state_dir / KILL_IN_COMPACTION).exists():
            tables = {f.name for f in store.path.glob("*.ldb")}
            db = store._open()
            compacting = threading.Thread(target=db.compact_range, daemon=True)
            compacting.start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                new = {f.name for f in store.path.glob("*.ldb")} - tables
                if new or not compacting.is_alive():
                    break
            (state_dir / KILLED).write_text(
                f"{'compacting' if compacting.is_alive() else 'done'} {sorted(new)}")
            os.kill(os.getpid(), signal.SIGKILL)

    store._append = commit  # type: ignore[method-assign]


async def _spawn(route_url: str, state_dir: Path) -> tuple[asyncio.subprocess.Process, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.test_checkpoint", route_url, str(state_dir), *LOGS,
        stdout=asyncio.subprocess.PIPE, cwd=ROOT, env=env)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    return proc, line.decode().strip()


async def _scrape(url: str) -> dict:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        assert r.status == 200
        return parse(await r.text())


def _last_seq(samples: dict, w: str) -> float:
    return samples.get(("zaroz_events_last_seq", frozenset({("workload", w)})), 0)


async def _scrape_until(url: str, pred, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        samples = await _scrape(url)
        if pred(samples):
            return samples
        assert time.monotonic() < deadline, "exporter did not get there in time"
        await asyncio.sleep(0.1)


def _is_counter(sample: str) -> bool:
    kinds = {m.name: m.kind for m in catalog.METRICS}
    base = sample.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")
    return kinds.get(sample) is catalog.Kind.COUNTER or (
        kinds.get(base) is catalog.Kind.HISTOGRAM and sample != base)


async def _killed_then_restarted(tmp_path: Path, feeds: tuple[float, ...],
                                 kill: Callable[[asyncio.subprocess.Process, str],
                                                Awaitable[None]],
                                 check: Callable[[dict[str, Any], dict], None]) -> None:
    """A first process scraped while the stream goes on (`feeds`), then more applied and never
    scraped, then `kill`ed; `check` looks at the store and the last samples it exposed; a second
    process on the same state dir must end exactly at the truth."""
    route = RouteServer(SimConfig(workloads=2).workload_list())
    route_url = await route.start()
    n = {w: len(evs) for w, evs in LOGS.items()}
    stream = Feed(route, LOGS)
    feed, fed = stream.to, stream.fed

    procs = []
    try:
        feed(0.3)
        proc, url = await _spawn(route_url, tmp_path)
        procs.append(proc)
        for f in feeds:  # scrapes while the stream goes on
            await _scrape_until(url, lambda s: all(_last_seq(s, w) == fed[w] for w in LOGS))
            feed(f)
        first = await _scrape_until(
            url, lambda s: all(_last_seq(s, w) == fed[w] for w in LOGS))
        feed(0.7)  # applied by the first process but never scraped: must count in the second
        await asyncio.sleep(1.0)
        await kill(proc, url)
        stored = read_state(tmp_path)
        assert stored is not None
        check(stored, first)

        feed(1.0)
        proc, url = await _spawn(route_url, tmp_path)
        procs.append(proc)
        last = await _scrape_until(url, lambda s: all(_last_seq(s, w) == n[w] for w in LOGS))
        # Counters continue from the checkpoint: the last process alone shows the whole truth,
        # and nothing it shows went below what the first one exposed (no reset to a scraper).
        assert assert_matches_truth(last, TRUTH, list(LOGS)) > 100
        went_down = {k: (v, last.get(k, 0)) for k, v in first.items()
                     if _is_counter(k[0]) and last.get(k, 0) < v
                     and not k[0].startswith("zaroz_checkpoint_")}  # this process's own writes
        assert not went_down
    finally:
        for p in procs:
            if p.returncode is None:
                p.send_signal(signal.SIGKILL)
                await p.wait()
        await route.stop()


async def test_kill_and_restart_counts_every_event_once(tmp_path: Path):
    async def kill(proc: asyncio.subprocess.Process, url: str) -> None:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()

    def check(stored: dict[str, Any], first: dict) -> None:
        saved = stored["workloads"]
        assert all(saved[w]["cursor"] == _last_seq(first, w) for w in LOGS)
        # Units created before the kill and not ready yet: their readiness spans the restart.
        waiting = sum(1 for w in LOGS for u in saved[w]["log"]["units"].values()
                      if u[0] is not None and not u[1])
        assert waiting > 0

    await _killed_then_restarted(tmp_path, (0.4, 0.5, 0.6), kill, check)


async def test_kill_in_the_middle_of_a_checkpoint_loses_and_repeats_nothing(tmp_path: Path):
    """SIGKILL in the middle of one incremental checkpoint's append (its batch half in the
    log): the store stays at the last checkpoint committed (that of the last scrape), and the
    next process ends exactly at the truth, no counter below what a scraper saw."""
    async def kill(proc: asyncio.subprocess.Process, url: str) -> None:
        (tmp_path / KILL_NEXT_SAVE).touch()  # what was applied since the last scrape is in it
        with pytest.raises(aiohttp.ClientError):
            await _scrape(url)  # its checkpoint dies half written: nothing is exposed
        await proc.wait()
        assert proc.returncode == -signal.SIGKILL
        appended, kept = map(int, (tmp_path / KILLED).read_text().split())
        assert 0 < kept < appended
        (tmp_path / KILL_NEXT_SAVE).unlink()

    def check(stored: dict[str, Any], first: dict) -> None:
        assert {w: e["cursor"] for w, e in stored["workloads"].items()} == {
            w: _last_seq(first, w) for w in LOGS}  # the last commit, not half the next

    await _killed_then_restarted(tmp_path, (0.4, 0.5), kill, check)


async def test_kill_in_the_middle_of_a_compaction_loses_and_repeats_nothing(tmp_path: Path):
    """SIGKILL while LevelDB compacts the store (its first new table begun, the compaction not
    finished): the restore holds the last checkpoint committed, and the next process ends
    exactly at the truth."""
    async def kill(proc: asyncio.subprocess.Process, url: str) -> None:
        (tmp_path / KILL_IN_COMPACTION).touch()
        with pytest.raises(aiohttp.ClientError):
            await _scrape(url)  # committed, but killed before the scrape is answered
        await proc.wait()
        assert proc.returncode == -signal.SIGKILL
        where, tables = (tmp_path / KILLED).read_text().split(" ", 1)
        assert where == "compacting" and tables != "[]"
        (tmp_path / KILL_IN_COMPACTION).unlink()

    def check(stored: dict[str, Any], first: dict) -> None:  # the commit before the kill
        assert all(stored["workloads"][w]["cursor"] >= _last_seq(first, w) for w in LOGS)

    await _killed_then_restarted(tmp_path, (0.4, 0.5), kill, check)


if __name__ == "__main__":
    asyncio.run(_harness(sys.argv[1], sys.argv[2], sys.argv[3:]))


def test_native_buckets_continue_from_the_checkpoint(tmp_path: Path):
    p = _fed(600)
    hist = p.registry["zaroz_unit_ready_seconds"].labels("wl-1")
    native = hist.native_state()  # type: ignore[union-attr]
    assert native is not None and native["count"]
    cp = Checkpointer(tmp_path, p)
    cp.save()
    cp.close()
    q = Pipeline()
    Checkpointer(tmp_path, q).load()
    restored = q.registry["zaroz_unit_ready_seconds"].labels("wl-1")
    assert restored.native_state() == native  # type: ignore[union-attr]
    assert restored.count == hist.count  # type: ignore[union-attr]


def test_a_family_whose_labels_changed_restarts_at_zero_not_the_whole_checkpoint(tmp_path: Path):
    p = _fed(300)
    cp = Checkpointer(tmp_path, p)
    cp.save()
    cp.close()
    # As a checkpoint from before zaroz_events_duplicate_total had its `source` label.
    _with_old_duplicate_series(tmp_path)
    q = Pipeline()
    Checkpointer(tmp_path, q).load()
    assert q.logs["wl-1"].snapshot() == p.logs["wl-1"].snapshot()
    created = ("wl-1", "unit.created")
    assert q.registry["zaroz_events_total"].series[created].value == \
        p.registry["zaroz_events_total"].series[created].value
    assert all(s.value == 0 for s in q.registry["zaroz_events_duplicate_total"].series.values())


def test_a_workload_held_when_saved_is_marked_held(tmp_path: Path):
    p = _fed(50)
    p.registry.hold(["wl-1"])
    cp = Checkpointer(tmp_path, p)
    cp.save()
    cp.close()
    q = Pipeline()
    loaded = Checkpointer(tmp_path, q)
    loaded.load()
    assert loaded.held_at_save == {"wl-1"}


def _serve_config(state_dir: Path, route_url: str, *more: str):
    from exporter.cli import build_parser
    from exporter.commands.config import ServeConfig

    return ServeConfig.from_args(build_parser().parse_args(
        ["serve", "--listen", "127.0.0.1:0", "--kube", "off", "--events-url", route_url,
         "--state-dir", str(state_dir), *more]))


async def test_a_start_that_cannot_read_the_checkpoint_leaves_it_as_it_was(tmp_path: Path):
    """The refusal is one line naming --state-dir, and the file it refused is not replaced by
    an empty state (the next start would then count everything again without a word)."""
    from exporter.commands.errors import ConfigError
    from exporter.commands.serve import start

    route = RouteServer(SimConfig(workloads=1).workload_list())
    url = await route.start()
    try:
        bad = b'{"v": 2, "workloads": {"wl-1": {"cursor": 7'  # cut short by a full disk
        (tmp_path / FILE).write_bytes(bad)
        with pytest.raises(ConfigError, match="--state-dir"):
            await start(_serve_config(tmp_path, url))
        assert (tmp_path / FILE).read_bytes() == bad
    finally:
        await route.stop()


async def test_a_second_exporter_on_the_state_dir_with_traces_is_a_config_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from exporter.commands.errors import ConfigError
    from exporter.commands.serve import start

    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    route = RouteServer(SimConfig(workloads=1).workload_list())
    url = await route.start()
    traced = ("--otlp-endpoint", "http://127.0.0.1:9")  # nothing listens: spans are only queued
    first = await start(_serve_config(tmp_path, url, *traced))
    try:
        with pytest.raises(ConfigError, match=r"--state-dir.*in use by another exporter"):
            await start(_serve_config(tmp_path, url, *traced))
    finally:
        await first.stop()
        await route.stop()


async def test_the_last_save_at_shutdown_keeps_a_backlog_held(tmp_path: Path):
    """Stopped mid-backlog with no scrape since: the shutdown checkpoint still marks the log
    held (its counters were never exposed), so the next process holds it too."""
    from exporter.commands.serve import start
    from tests.waiting import until

    route = RouteServer(SimConfig(workloads=2).workload_list())
    url = await route.start()
    wl = next(iter(LOGS))
    route.append(wl, LOGS[wl])
    running = await start(_serve_config(tmp_path, url, "--workload", wl, "--page-limit", "1"))
    try:
        log = running.pipeline.workload(wl)
        await until(lambda: log.applied_through >= 5, 20.0)
        assert log.applied_through < len(LOGS[wl])  # still catching up
    finally:
        await running.stop()
        await route.stop()
    stored = read_state(tmp_path)
    assert stored is not None
    assert stored["workloads"][wl].get("held") is True


def _with_old_duplicate_series(state_dir: Path) -> None:
    """The store as one from before zaroz_events_duplicate_total had its `source` label."""
    store = Store(state_dir / DB)
    db = store._open()
    with db.write_batch(sync=True) as batch:
        for k, v in db.iterator(prefix=b"series\0"):
            if row_of(v)[0] == "zaroz_events_duplicate_total":
                batch.delete(k)
    store.write(Changes(series=[
        ("zaroz_events_duplicate_total", orjson.dumps(["wl-1"]).decode(), 7, None)]))
    store.close()
