"""serve's background loops survive their own faults, and a save that raises anything is a
counted checkpoint failure: faults injected in-process, through `serve.start`."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import pytest

from exporter.sinks.metrics.family import Registry
from exporter.sources.backoff import Backoff
from exporter.sources.tasks import supervised
from exporter.wiring.events import Pipeline
from exporter.wiring.state.checkpoint import Checkpointer, CheckpointError
from tests.simlogs import parse, value
from tests.waiting import until
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer


def _died(registry: Registry, task: str):
    return registry.counter("zaroz_exporter_task_restarts_total").labels(task).inc


def _restarts(registry: Registry, task: str) -> float:
    return registry.families["zaroz_exporter_task_restarts_total"].series[(task,)].value


async def test_a_loop_that_dies_is_logged_counted_and_restarted(caplog):
    registry = Registry()
    runs: list[int] = []
    beat = asyncio.Event()

    async def loop() -> None:
        runs.append(1)
        if len(runs) <= 2:
            raise ZeroDivisionError("injected")
        beat.set()
        await asyncio.Event().wait()  # the third run lives

    caplog.set_level(logging.ERROR)
    task = asyncio.create_task(supervised("expire", loop, _died(registry, "expire"),
                                          Backoff(0.001, 0.002)))
    try:
        assert _restarts(registry, "expire") == 0  # at 0 from the start
        await asyncio.wait_for(beat.wait(), 5)
        assert len(runs) == 3
        assert _restarts(registry, "expire") == 2
        died = [r for r in caplog.records if r.getMessage().startswith("background task died")]
        assert len(died) == 2
        assert died[0].exc_info is not None and died[0].exc_info[0] is ZeroDivisionError
        assert died[0].__dict__["task"] == "expire"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_loop_that_returns_is_restarted_too():
    registry = Registry()
    runs: list[int] = []

    async def loop() -> None:
        runs.append(1)

    task = asyncio.create_task(supervised("collector", loop, _died(registry, "collector"),
                                          Backoff(0.001, 0.002)))
    await until(lambda: len(runs) >= 3, 5.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _restarts(registry, "collector") >= 2


def test_any_exception_taking_the_changes_is_a_counted_failure(tmp_path: Path, monkeypatch):
    """Not only the errors foreseen: a save that raises is CheckpointError, counted, and the
    save after it replaces the store."""
    p = Pipeline()
    cp = Checkpointer(tmp_path, p)
    p.workload("wl")
    real = Checkpointer.changes

    def broken(self):
        raise OverflowError("injected")

    monkeypatch.setattr(Checkpointer, "changes", broken)
    with pytest.raises(CheckpointError, match="injected"):
        cp.save()
    errors = p.registry.families["zaroz_checkpoint_saves_total"].series[("error",)]
    assert errors.value == 1
    monkeypatch.setattr(Checkpointer, "changes", real)
    assert cp.save()  # the store replaced whole
    cp.close()


def _config(state_dir: Path, route_url: str, *more: str):
    from exporter.cli import build_parser
    from exporter.commands.config import ServeConfig

    return ServeConfig.from_args(build_parser().parse_args(
        ["serve", "--listen", "127.0.0.1:0", "--kube", "off", "--events-url", route_url,
         "--state-dir", str(state_dir), *more]))


async def test_serve_restarts_a_dead_loop_and_a_failing_save_is_a_503_not_a_traceback(
        tmp_path: Path, monkeypatch):
    from exporter.commands import serve
    from exporter.wiring import expiry

    route = RouteServer(SimConfig(workloads=1).workload_list())
    url = await route.start()
    sweeps: list[int] = []
    real_sweep = expiry.ExpiryClock.sweep_steps

    def dies_twice(self, *a, **k):
        sweeps.append(1)
        if len(sweeps) <= 2:
            raise RuntimeError("injected expiry fault")
        return real_sweep(self, *a, **k)

    monkeypatch.setattr(expiry.ExpiryClock, "sweep_steps", dies_twice)
    monkeypatch.setattr("exporter.commands.serve.Backoff",
                        lambda *a, **k: Backoff(0.01, 0.02))
    running = await serve.start(_config(tmp_path, url, "--unit-expiry-interval", "0.05",
                                        "--checkpoint-interval", "0.05"))
    try:
        registry = running.pipeline.registry
        await until(lambda: len(sweeps) >= 4, 20.0)
        assert _restarts(registry, "expire") == 2
        assert _restarts(registry, "checkpoint") == 0
        saved = registry.families["zaroz_checkpoint_last_success_timestamp_seconds"].series[()]
        await until(lambda: saved.value > 0, 20.0)

        def broken(self):
            raise OverflowError("injected save fault")

        real_changes = Checkpointer.changes
        monkeypatch.setattr(Checkpointer, "changes", broken)
        errors = registry.families["zaroz_checkpoint_saves_total"].series[("error",)]
        async with aiohttp.ClientSession() as s:
            async with s.get(running.url + "/metrics") as r:
                assert r.status == 503
                assert "injected save fault" in await r.text()
            await until(lambda: errors.value >= 3, 20.0)  # the periodic saves fail too, alive
            assert _restarts(registry, "checkpoint") == 0
            monkeypatch.setattr(Checkpointer, "changes", real_changes)
            before = saved.value
            await until(lambda: saved.value > before, 20.0)  # saves again, by itself
            async with s.get(running.url + "/metrics") as r:
                assert r.status == 200
                samples = parse(await r.text())
        assert value(samples, "zaroz_exporter_task_restarts_total", task="expire") == 2
        assert value(samples, "zaroz_checkpoint_saves_total", result="error") >= 3
    finally:
        await running.stop()
        await route.stop()
