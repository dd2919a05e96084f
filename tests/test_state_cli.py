"""Operating a state dir with real processes: `state check` and `state backup` on a running
`serve` (a backup restored into a fresh state dir continues every counter, and ends exactly at
the truth), a damaged store ending `serve` at once with one line naming the fix, and a second
exporter on one directory refused at start, whichever --start-from."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from exporter.sinks.traces.outbox import ACKED_FILE
from exporter.wiring.state.store import DB, VERSION, Store, read_state
from tests.otlp_receiver import OtlpReceiver
from tests.serving import MAIN, ROOT, Feed, Scraper, Serve, free_port, scrape
from tests.simlogs import assert_matches_truth, finite_logs, value
from tests.test_restarts import _caught_up, _counter_like
from tests.test_traces_restart import LOGS as TRACE_LOGS
from tests.test_traces_restart import key, scrape_until, spawn, uninterrupted
from tests.test_traces_restart import scrape as scrape_saved
from tests.waiting import until
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


async def cli(*args: str) -> tuple[int, str, str]:
    """`zaroz-exporter ARGS` as a process: exit code, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", MAIN, *args, cwd=ROOT, env=ENV,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def serve_exit(*args: str, timeout: float = 20.0) -> tuple[int | None, list[str]]:
    """A `serve` expected to end at start: its exit code (None: still serving after
    `timeout`, then killed) and its stderr lines."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", MAIN, "serve", "--listen", f"127.0.0.1:{port}", "--kube", "off",
        "--log-level", "warning", *args, cwd=ROOT, env=ENV,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        assert proc.stderr is not None
        return None, (await proc.stderr.read()).decode().splitlines()
    assert proc.stderr is not None
    return proc.returncode, (await proc.stderr.read()).decode().splitlines()


def _event_counters(samples: dict[Any, float]) -> dict[Any, float]:
    """The counter-like samples the event log moves (the route's own request counters and the
    checkpoint's save counters describe a process, not the log)."""
    return {k: v for k, v in samples.items() if _counter_like(k[0])
            and not k[0].startswith(("zaroz_checkpoint_", "zaroz_route_"))}


async def test_check_and_backup_of_a_running_exporter_restore_into_a_new_serve(
        tmp_path: Path):
    logs, truth = finite_logs(seed=23, workloads=2, seconds=300, rate=0.7)
    route = RouteServer(SimConfig(workloads=2).workload_list())
    base = await route.start()
    feed = Feed(route, logs)
    state, dest, new = tmp_path / "state", tmp_path / "backup", tmp_path / "restored"
    flags = ("--events-url", base, "--workload", "wl-1", "--workload", "wl-2", "--wait", "1",
             "--page-limit", "17", "--backoff-max", "0.2", "--checkpoint-interval", "0.2")
    a = Serve(*flags, "--state-dir", str(state))
    c = Serve(*flags, "--state-dir", str(new))
    scraper = Scraper(a.url, 0.05)  # a checkpoint at every scrape: the store is being written
    try:
        feed.to(0.4)
        await a.start()
        before = _event_counters(await _caught_up(a.url, feed.fed))
        at_start = dict(feed.fed)
        scraper.start()
        feed.to(0.6)  # applied while check and backup read the store
        rc, out, err = await cli("state", "check", str(state), "--output", "json", "--verbose")
        assert rc == 0, (out, err)
        report = json.loads(out)
        assert report["sound"] and not report["problems"]
        assert a.proc is not None and a.proc.pid in report["in_use_by"]
        held = report["store"]
        assert held["version"] == VERSION and held["workloads"] == 2 and held["units"] > 0
        assert held["series"] > 0
        for w in ("wl-1", "wl-2"):
            assert at_start[w] <= held["per_workload"][w]["cursor"] <= feed.fed[w]
        names = {f["name"] for f in report["files"]}
        assert {"lock", DB} <= names

        rc, out, err = await cli("state", "backup", str(state), str(dest))
        assert rc == 0, (out, err)
        assert "backed up" in out
        assert len(scraper.scrapes) > 3  # written while the copy was taken
        copied = read_state(dest)
        assert copied is not None and not Store(dest / DB).verify()
        cursors = {w: e["cursor"] for w, e in copied["workloads"].items()}
        assert all(at_start[w] <= cursors[w] <= feed.fed[w] for w in cursors)
        await scraper.stop()
        feed.to(0.8)
        await asyncio.sleep(0.5)
        await a.kill()  # the pod is lost; its volume too

        new.mkdir()
        for f in dest.iterdir():
            (shutil.copytree if f.is_dir() else shutil.copy2)(f, new / f.name)
        await c.start()
        async with aiohttp.ClientSession() as s:
            first = await scrape(c.url, s)
        assert first is not None
        # Restored, not begun again: every counter the old process showed before the backup
        # is there, at least as high (a start with no checkpoint would hold the workloads out
        # of the exposition, then count from zero).
        low = {k: (v, first.get(k)) for k, v in before.items()
               if k not in first or first[k] < v}
        assert not low, list(low.items())[:5]
        feed.to(1.0)
        final = await _caught_up(c.url, feed.fed)
    finally:
        await scraper.stop()
        await a.kill()
        await c.kill()
        await route.stop()
    # Every event since the backup's cursors applied once more, none twice, none missed.
    assert assert_matches_truth(final, truth, list(logs)) > 100
    assert value(final, "zaroz_events_last_seq", workload="wl-1") == len(logs["wl-1"])


async def _stopped_state(tmp_path: Path) -> Path:
    """A state dir written by `serve` (caught up with half a log, units in flight, then
    stopped cleanly)."""
    logs, _ = finite_logs(seed=29, workloads=1, seconds=200, rate=1.0)
    events = logs["wl-1"][:len(logs["wl-1"]) // 2]
    route = RouteServer(SimConfig(workloads=1).workload_list())
    base = await route.start()
    state = tmp_path / "state"
    a = Serve("--events-url", base, "--workload", "wl-1", "--wait", "1",
              "--state-dir", str(state))
    try:
        route.append("wl-1", events)
        await a.start()
        await _caught_up(a.url, {"wl-1": len(events)})
        await a.terminate()
    finally:
        await a.kill()
        await route.stop()
    return state


def _break_table(db: Path) -> None:
    """Flip a byte inside a table's data: only its block's checksum says so (the store is
    first folded into tables, as LevelDB's compaction does)."""
    store = Store(db)
    store._open().compact_range()
    store.close()
    table = max(db.glob("*.ldb"))
    data = bytearray(table.read_bytes())
    data[len(data) // 3] ^= 0xFF
    table.write_bytes(bytes(data))


def _break_header(db: Path) -> None:
    """The file naming the store's manifest: nothing of the store can be found."""
    (db / "CURRENT").write_bytes(b"not a database at all\n")


@pytest.mark.parametrize(("damage", "start_from"), [
    (_break_table, "checkpoint"), (_break_header, "checkpoint"),
    (_break_table, "earliest"), (_break_header, "earliest")])
async def test_a_damaged_store_ends_serve_at_once_with_one_line_naming_the_fix(
        tmp_path: Path, damage: Any, start_from: str):
    """Also when the start ignores the checkpoint: it could not replace a damaged store."""
    state = await _stopped_state(tmp_path)
    damage(state / DB)
    rc, out, _ = await cli("state", "check", str(state))
    assert rc == 1 and "PROBLEMS" in out, out
    start = time.monotonic()
    code, lines = await serve_exit("--state-dir", str(state), "--events-url",
                                   "http://127.0.0.1:9", "--workload", "wl-1",
                                   "--start-from", start_from)
    assert code == 2, ("serve went on with a damaged store", lines)
    assert time.monotonic() - start < 15
    assert len(lines) == 1, lines
    line = lines[0]
    assert "--state-dir" in line and str(state / DB) in line
    assert "restore a backup" in line and "--start-from head or earliest" in line


@pytest.mark.parametrize("start_from", ["head", "earliest", "checkpoint"])
async def test_a_second_exporter_on_one_state_dir_is_refused_at_start(
        tmp_path: Path, start_from: str):
    route = RouteServer(SimConfig(workloads=1).workload_list())
    base = await route.start()
    flags = ("--events-url", base, "--workload", "wl-1", "--wait", "1",
             "--state-dir", str(tmp_path / "state"), "--start-from", start_from,
             "--checkpoint-interval", "0")
    first = Serve(*flags)
    try:
        await first.start()
        code, lines = await serve_exit(*flags, timeout=10)
        assert code == 2, ("a second exporter started on the same state dir", lines)
        assert len(lines) == 1 and "in use by another exporter" in lines[0], lines
        assert first.proc is not None and first.proc.returncode is None
    finally:
        await first.kill()
        await route.stop()


async def test_check_and_backup_usage_and_errors(tmp_path: Path):
    rc, _, err = await cli("state", "check", str(tmp_path / "absent"))
    assert rc == 2 and err.count("\n") == 1 and "no such directory" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, out, _ = await cli("state", "check", str(empty), "--output", "json")
    assert rc == 0 and json.loads(out)["store"] is None  # no checkpoint: nothing wrong
    rc, _, err = await cli("state", "backup", str(empty), str(tmp_path / "b"))
    assert rc == 2 and "no checkpoint to back up" in err
    state = await _stopped_state(tmp_path)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    rc, _, err = await cli("state", "backup", str(state), str(taken))
    assert rc == 2 and err.count("\n") == 1 and "must be an empty directory or absent" in err
    rc, out, _ = await cli("state", "backup", str(state), str(tmp_path / "ok"), "--output", "json")
    assert rc == 0 and json.loads(out)["files"] == [DB]
    assert read_state(tmp_path / "ok") == read_state(state)
    # The store alone: no lock, no trace mark without traces.
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == [DB]
    rc, _, err = await cli("state", "check")
    assert rc == 2 and err.count("\n") == 1 and "DIR" in err


async def test_a_backup_with_traces_restored_sends_every_span_once(tmp_path: Path):
    """With traces on, the backup carries the outbox's mark: the restored exporter sends
    neither the spans the collector had already accepted (still listed in the store until
    the next save) nor any span twice, and every span of the log arrives."""
    expected = uninterrupted()
    route = RouteServer(SimConfig(workloads=2).workload_list())
    route_url = await route.start()
    feed = Feed(route, TRACE_LOGS)
    state, dest, new = tmp_path / "state", tmp_path / "backup", tmp_path / "restored"
    procs = []
    with OtlpReceiver() as rx:
        try:
            feed.to(0.5)
            proc, url = await spawn(route_url, state, rx.endpoint)
            procs.append(proc)
            samples = await scrape_until(url, feed.fed)  # saved; its spans released
            await until(lambda: len(rx.spans) >= value(samples, "zaroz_traces_spans_total"),
                        20.0, 0.05)
            rc, out, err = await cli("state", "check", str(state), "--output", "json")
            assert rc == 0, (out, err)
            traces = json.loads(out)["store"]["traces"]
            # Handled after the save: still stored, and only the mark says they are sent.
            assert traces["spans_stored"] > 0 and traces["spans_pending"] == 0
            rc, out, err = await cli("state", "backup", str(state), str(dest))
            assert rc == 0, (out, err)
            assert (dest / ACKED_FILE).exists()
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            new.mkdir()
            for f in dest.iterdir():
                (shutil.copytree if f.is_dir() else shutil.copy2)(f, new / f.name)
            feed.to(1.0)
            proc, url = await spawn(route_url, new, rx.endpoint)
            procs.append(proc)
            await scrape_until(url, {w: len(evs) for w, evs in TRACE_LOGS.items()})
            await scrape_saved(url)
            await until(lambda: len(rx.spans) >= sum(expected.values()), 20.0, 0.05)
            await asyncio.sleep(0.5)  # anything more (a duplicate) would arrive by now
        finally:
            for p in procs:
                if p.returncode is None:
                    p.send_signal(signal.SIGKILL)
                    await p.wait()
            await route.stop()
        got = Counter(key(s) for s in rx.spans)
    assert max(got.values()) == 1, "a span was exported twice"
    assert got == expected


async def test_after_a_sigkill_the_backup_holds_the_log_and_tables_alone_are_flagged(
        tmp_path: Path):
    """A SIGKILLed exporter leaves its last checkpoints in the store's log: `state backup`
    copies them, and `state check` flags a copy of the store without its log files, which
    holds none of them."""
    logs, _ = finite_logs(seed=31, workloads=1, seconds=100, rate=1.0)
    route = RouteServer(SimConfig(workloads=1).workload_list())
    base = await route.start()
    state = tmp_path / "state"
    a = Serve("--events-url", base, "--workload", "wl-1", "--wait", "1",
              "--state-dir", str(state), "--checkpoint-interval", "0")
    try:
        route.append("wl-1", logs["wl-1"])
        await a.start()
        await _caught_up(a.url, {"wl-1": len(logs["wl-1"])})
        await a.kill()
    finally:
        await a.kill()
        await route.stop()
    logs_of = sorted((state / DB).glob("*.log"))
    assert logs_of and any(f.stat().st_size > 0 for f in logs_of)
    alone = tmp_path / "alone"
    shutil.copytree(state / DB, alone / DB, ignore=shutil.ignore_patterns("*.log", "LOCK"))
    rc, out, _ = await cli("state", "check", str(alone))
    assert rc == 1 and "without its log files" in out, out
    rc, out, err = await cli("state", "backup", str(state), str(tmp_path / "b"))
    assert rc == 0, (out, err)
    copied = read_state(tmp_path / "b")
    assert copied is not None
    assert copied["workloads"]["wl-1"]["cursor"] == len(logs["wl-1"])


async def test_a_backup_that_cannot_be_taken_leaves_no_half_copy(tmp_path: Path):
    state = await _stopped_state(tmp_path)
    _break_header(state / DB)
    dest = tmp_path / "b"
    rc, _, err = await cli("state", "backup", str(state), str(dest))
    assert rc == 1 and err.count("\n") == 1 and str(state / DB) in err, err
    assert not dest.exists()


async def test_check_of_a_stopped_state_dir_changes_no_file(tmp_path: Path):
    """Opening a LevelDB recovers its log into a table and holds its lock: `state check` reads
    a copy, so the store is left byte for byte as it was, and an exporter starting meanwhile
    is not refused by the check."""
    state = await _stopped_state(tmp_path)

    def files() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted((state / DB).iterdir())}

    before = files()
    assert any(name.endswith(".log") and data for name, data in before.items())
    rc, out, _ = await cli("state", "check", str(state))
    assert rc == 0, out
    assert files() == before
    assert not [p for p in state.iterdir() if p.name.startswith(".copy-")]
