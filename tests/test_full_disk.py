"""A full state disk: `serve` on a real, small file system filled up. Its scrapes fail while
nothing can be made durable, its event loop keeps answering, and the first save after space
comes back makes everything durable again: the counters end exact, and again after a SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

from exporter.wiring.events import Pipeline
from exporter.wiring.state.checkpoint import Checkpointer, CheckpointError
from exporter.wiring.state.store import DB, Store
from tests.components import missing
from tests.serving import Feed, Serve, scrape
from tests.simlogs import assert_matches_truth, finite_logs, value
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer


@contextlib.contextmanager
def _small_disk(path: Path, size: str) -> object:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, check=False)
    if done.returncode != 0:
        missing(f"cannot mount a small file system here (needs root, as CI runs): "
                f"{done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(disk: Path) -> Path:
    """Fill the file system up; returns the file that holds the space."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (64 << 10, 4 << 10, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as e:
                    assert e.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    return filler


async def _status(url: str, session: aiohttp.ClientSession) -> tuple[int, float]:
    t = time.perf_counter()
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
        await r.read()
        return r.status, time.perf_counter() - t


async def _caught_up(url: str, fed: dict[str, int], timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while True:
            got = await scrape(url, s)
            if got and all(value(got, "zaroz_events_last_seq", workload=w) == n
                           for w, n in fed.items()):
                return got
            assert time.monotonic() < deadline, "the exporter did not catch up"
            await asyncio.sleep(0.1)


def _whole_save_bytes(state_dir: Path, copy: Path) -> int:
    """The bytes of a save of the whole stored state (`Changes.size`), from a backup."""
    Store(state_dir / DB).backup(copy)
    cp = Checkpointer(copy, Pipeline())
    cp.load()
    cp._synced = False  # as after a start without a checkpoint: the next save is whole
    size = cp.changes().size()
    cp.close()
    return size


async def test_a_full_state_disk_fails_scrapes_then_recovers_durability_exactly(tmp_path: Path):
    logs, truth = finite_logs(seed=21, workloads=2, seconds=200, rate=0.7)
    route = RouteServer(SimConfig(workloads=2).workload_list())
    base = await route.start()
    feed = Feed(route, logs)
    with _small_disk(tmp_path / "disk", "6m") as disk:
        serve = Serve("--events-url", base, "--workload", "wl-1", "--workload", "wl-2",
                      "--wait", "1", "--state-dir", str(disk / "state"),
                      "--checkpoint-interval", "0")  # a save at each scrape only
        try:
            feed.to(0.3)
            await serve.start()
            before = await _caught_up(serve.url, feed.fed)
            filler = _fill(disk)
            feed.to(0.32)  # applied, but no save can be made durable
            refused, worst = 0, 0.0
            deadline = time.monotonic() + 30
            async with aiohttp.ClientSession() as s:
                while refused < 5:
                    status, _ = await _status(serve.url + "/metrics", s)
                    refused += status != 200
                    _, took = await _status(serve.url + "/healthz", s)
                    worst = max(worst, took)
                    assert time.monotonic() < deadline, "scrapes kept answering on a full disk"
                    await asyncio.sleep(0.05)
            assert worst < 1.0  # the loop is not held by the failing saves
            filler.unlink()  # space again: the next save makes it all durable
            async with aiohttp.ClientSession() as s:
                assert (await _status(serve.url + "/metrics", s))[0] == 200
                recovered = await scrape(serve.url, s)  # shows that save's bytes
            assert recovered is not None
            # It wrote what changed since the last durable save, not the whole state again.
            whole = _whole_save_bytes(disk / "state", tmp_path / "copy")
            assert value(recovered, "zaroz_checkpoint_bytes") < 0.8 * whole
            feed.to(1.0)
            final = await _caught_up(serve.url, feed.fed)
            assert assert_matches_truth(final, truth, list(logs)) > 100
            errors = value(final, "zaroz_checkpoint_saves_total", result="error")
            assert errors >= 5
            for k, v in before.items():  # no counter went below what was exposed
                if k[0] == "zaroz_events_total":
                    assert final.get(k, 0) >= v
            await serve.kill()  # durable: a new process starts from it, exact
            await serve.start()
            again = await _caught_up(serve.url, feed.fed)
            assert assert_matches_truth(again, truth, list(logs)) > 100
        finally:
            await serve.kill()
            await route.stop()


def test_a_start_on_a_full_state_disk_says_the_disk_is_full_and_keeps_the_checkpoint(
        tmp_path: Path):
    # A store left with its log unmerged (a SIGKILL, or a stop before compaction): opening it
    # writes a table, which a full disk refuses. The checkpoint is intact, so the error says the
    # disk is full and never to move the state away (counters would restart), and the same
    # start succeeds once space is back.
    from tests.simlogs import finite_logs as logs_of

    logs, _ = logs_of(seed=5, workloads=2, seconds=60, rate=0.5)
    with _small_disk(tmp_path / "disk", "4m") as disk:
        p = Pipeline()
        for w, evs in logs.items():
            for e in evs:
                p.workload(w).offer(e)
        cp = Checkpointer(disk / "state", p)
        cp.save()
        cp.close()
        filler = _fill(disk)
        refused = Checkpointer(disk / "state", Pipeline())
        with pytest.raises(CheckpointError) as err:
            refused.load()
        refused.close()  # as the process ending does: its lock released
        message = str(err.value)
        assert "full" in message and "intact" in message, message
        assert "move the directory away" not in message, message
        filler.unlink()
        q = Pipeline()
        cp = Checkpointer(disk / "state", q)
        assert cp.load() == len(logs)
        cp.close()
