"""A real `serve` with --state-dir exporting to a real OTLP receiver that is slow, refusing or
absent: every span reaches it (by span id), across a SIGKILL too; the only duplicates are spans
sent again at a start, and they are counted; the spans kept in memory stay bounded by what waits
for the receiver, not by what was ever exported."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from exporter.sinks.traces.builder import SpanRecord
from exporter.sinks.traces.otlp import TraceConfig, TraceSink
from exporter.wiring.events import Pipeline
from tests.otlp_receiver import OtlpReceiver
from tests.serving import Feed, free_port
from tests.simlogs import finite_logs, parse, value
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer

ROOT = Path(__file__).resolve().parent.parent
Logs = dict[str, list[dict[str, Any]]]


class _Collect(TraceSink):
    """The spans one uninterrupted exporter ends, collected instead of exported."""

    def __init__(self) -> None:
        super().__init__(_Nothing(), TraceConfig())  # type: ignore[arg-type]
        self.ended: list[SpanRecord] = []

    def emit(self, r: SpanRecord) -> None:
        self.ended.append(r)


class _Nothing:
    def export_encoded(self, body: bytes, count: int) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def expected_ids(logs: Logs) -> set[str]:
    sink = _Collect()
    p = Pipeline(traces=sink)
    for wl, evs in logs.items():
        lg = p.workload(wl)
        for ev in evs:
            lg.offer(ev)
    sink.shutdown()
    ids = [f"{r.span_id:016x}" for r in sink.ended]
    assert len(ids) == len(set(ids))
    return set(ids)


class Exporter:
    """One `serve` process at a time on a state directory, restartable."""

    def __init__(self, route_url: str, state_dir: Path, otlp: str, workloads: list[str],
                 *extra: str, env: dict[str, str] | None = None) -> None:
        self.args = ["serve", "--listen", "127.0.0.1:0", "--events-url", route_url,
                     "--wait", "1", "--kube", "off", "--state-dir", str(state_dir),
                     "--otlp-endpoint", otlp, "--log-format", "json", *extra,
                     *(a for w in workloads for a in ("--workload", w))]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "OTEL_BSP_SCHEDULE_DELAY": "50",
                    **(env or {})}
        self.proc: asyncio.subprocess.Process | None = None
        self.url = ""

    async def start(self) -> None:
        proc = self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; from exporter.cli import main; sys.exit(main())",
            *self.args, stderr=asyncio.subprocess.PIPE, cwd=ROOT, env=self.env)
        assert proc.stderr is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = await asyncio.wait_for(proc.stderr.readline(), 30)
            assert line, "serve exited before serving"
            rec = orjson.loads(line) if line.startswith(b"{") else {}
            if rec.get("msg", rec.get("message")) == "serving metrics":
                asyncio.get_running_loop().create_task(_drain(proc.stderr))
                self.url = rec["url"].removesuffix("/metrics")
                return
        raise AssertionError("serve did not say where it serves")

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()

    async def terminate(self) -> float:
        """SIGTERM; the seconds it took to exit (cleanly)."""
        assert self.proc is not None
        t = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(self.proc.wait(), 30) == 0
        return time.monotonic() - t

    async def scrape(self) -> dict[Any, float]:
        """A scrape: it also saves a checkpoint, which releases the spans it covers."""
        async with aiohttp.ClientSession() as s, s.get(self.url + "/metrics") as r:
            assert r.status == 200
            return parse(await r.text())


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        await asyncio.sleep(0.1)


def received(rx: OtlpReceiver) -> tuple[set[str], int]:
    """The distinct span ids received, and how many spans were received in all."""
    spans = list(rx.spans)
    return {s.span_id for s in spans}, len(spans)


# -- a backlog far larger than what is in flight, a slow receiver, one SIGKILL ------------------

BACKLOG, _ = finite_logs(seed=21, workloads=2, seconds=300, rate=2.0)


async def test_a_backlog_behind_a_slow_receiver_and_a_sigkill_loses_no_span(tmp_path: Path):
    expected = expected_ids(BACKLOG)
    batch = 128
    assert len(expected) > 50 * batch  # far more than one batch in flight
    route = RouteServer(SimConfig(workloads=2).workload_list())
    for w, evs in BACKLOG.items():  # the whole log waits: a catch-up
        route.append(w, evs)
    route_url = await route.start()
    rx = OtlpReceiver().start()
    rx.delay = 0.04  # ~3,000 spans/s: the catch-up outruns it
    exp = Exporter(route_url, tmp_path, rx.endpoint, list(BACKLOG), "--checkpoint-interval",
                   "0.5", "--otlp-batch-size", str(batch), "--otlp-max-queue-size", "1000")
    try:
        await exp.start()
        await wait_for(lambda: _true(len(rx.spans) >= len(expected) // 3), 60,
                       "a third of the spans did not arrive")
        await exp.kill()  # mid-way: most spans wait in the checkpoint
        before, _ = received(rx)
        assert len(before) < len(expected)
        rx.delay = 0.005
        await exp.start()

        async def all_exported() -> bool:
            return value(await exp.scrape(), "zaroz_traces_spans_exported_total") >= len(
                expected)

        await wait_for(all_exported, 120, "not every span was exported")
        await asyncio.sleep(0.5)  # a duplicate beyond the documented ones would arrive by now
        last = await exp.scrape()
    finally:
        await exp.kill()
        rx.stop()
        await route.stop()
    got, total = received(rx)
    assert got == expected, f"{len(expected - got)} spans never received"
    duplicates = total - len(got)
    resent = value(last, "zaroz_traces_spans_resent_total")
    assert duplicates <= resent, "a span was sent twice without being counted as sent again"
    assert resent > 0  # the kill left spans released and not accepted
    # Exact across the kill: each span counted once, re-sent ones too.
    assert value(last, "zaroz_traces_spans_total") == len(expected)
    assert value(last, "zaroz_traces_spans_exported_total") == len(expected)
    assert value(last, "zaroz_traces_spans_dropped_total") == 0
    assert ("zaroz_traces_spans_waiting", frozenset()) in last


async def _true(x: object) -> bool:
    return bool(x)


# -- the receiver refusing, then absent, then back ---------------------------------------------

OUTAGE, _ = finite_logs(seed=22, workloads=1, seconds=200, rate=1.5)


async def test_a_receiver_refusing_then_absent_then_back_gets_every_span(tmp_path: Path):
    expected = expected_ids(OUTAGE)
    route = RouteServer(SimConfig(workloads=1).workload_list())
    route_url = await route.start()
    port = free_port()
    rx = OtlpReceiver(port=port).start()
    rx.fail_status = 503  # overloaded: refuses every request
    exp = Exporter(route_url, tmp_path, rx.endpoint, list(OUTAGE), "--checkpoint-interval",
                   "0.5", "--otlp-batch-size", "512",
                   env={"OTEL_EXPORTER_OTLP_TIMEOUT": "1"})  # the SDK's own retries: 1 s

    async def failures_reach(n: float) -> bool:
        return value(await exp.scrape(), "zaroz_traces_export_failures_total") >= n

    back = None
    try:
        await exp.start()
        Feed(route, OUTAGE).to(1.0)
        await wait_for(lambda: failures_reach(2), 60, "exports did not fail")
        rx.stop()  # absent: connections refused
        failed = value(await exp.scrape(), "zaroz_traces_export_failures_total")
        await wait_for(lambda: failures_reach(failed + 2), 60, "exports did not fail")
        assert not rx.spans
        back = OtlpReceiver(port=port).start()

        async def all_exported() -> bool:
            return value(await exp.scrape(), "zaroz_traces_spans_exported_total") >= len(
                expected)

        await wait_for(all_exported, 90, "not every span was exported")
        await asyncio.sleep(0.5)
        last = await exp.scrape()
    finally:
        await exp.kill()
        if back is not None:
            back.stop()
        await route.stop()
    got, total = received(back)
    assert got == expected, f"{len(expected - got)} spans never received"
    assert total == len(got)  # no restart: nothing sent twice
    assert value(last, "zaroz_traces_spans_exported_total") == len(expected)
    assert value(last, "zaroz_traces_spans_dropped_total") == 0
    assert value(last, "zaroz_traces_spans_waiting") == 0


async def test_a_stop_while_the_receiver_is_absent_keeps_every_span_for_the_next_start(
        tmp_path: Path):
    expected = expected_ids(OUTAGE)
    route = RouteServer(SimConfig(workloads=1).workload_list())
    route_url = await route.start()
    port = free_port()  # nothing listens there until the restart
    exp = Exporter(route_url, tmp_path, f"http://127.0.0.1:{port}", list(OUTAGE),
                   "--checkpoint-interval", "0.5", env={"OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
    rx = None
    try:
        await exp.start()
        Feed(route, OUTAGE).to(1.0)

        async def all_ended_and_failing() -> bool:
            s = await exp.scrape()
            return (value(s, "zaroz_traces_spans_total") >= len(expected)
                    and value(s, "zaroz_traces_export_failures_total") >= 1)

        await wait_for(all_ended_and_failing, 60, "spans did not end, or export did not fail")
        took = await exp.terminate()
        assert took < 5, f"shutdown took {took:.1f} s"  # it does not wait for the collector
        rx = OtlpReceiver(port=port).start()
        await exp.start()

        async def all_exported() -> bool:
            return value(await exp.scrape(), "zaroz_traces_spans_exported_total") >= len(
                expected)

        await wait_for(all_exported, 60, "not every span was exported")
        await asyncio.sleep(0.5)
        last = await exp.scrape()
    finally:
        await exp.kill()
        if rx is not None:
            rx.stop()
        await route.stop()
    got, total = received(rx)
    assert got == expected and total == len(got)
    assert value(last, "zaroz_traces_spans_resent_total") == len(expected)  # all waited
    assert value(last, "zaroz_traces_spans_total") == len(expected)
    assert value(last, "zaroz_traces_spans_exported_total") == len(expected)
    assert value(last, "zaroz_traces_spans_dropped_total") == 0


# -- a steady stream: what waits in memory stays bounded ---------------------------------------

STREAM, _ = finite_logs(seed=23, workloads=2, seconds=400, rate=1.5)
STEPS = 40


async def test_spans_kept_in_memory_stay_bounded_over_a_steady_stream(tmp_path: Path):
    expected = expected_ids(STREAM)
    route = RouteServer(SimConfig(workloads=2).workload_list())
    route_url = await route.start()
    rx = OtlpReceiver(keep=False).start()
    exp = Exporter(route_url, tmp_path, rx.endpoint, list(STREAM), "--checkpoint-interval",
                   "0.25", "--otlp-batch-size", "256")
    feed = Feed(route, STREAM)
    waiting: list[float] = []
    try:
        await exp.start()
        for i in range(1, STEPS + 1):
            feed.to(i / STEPS)
            await asyncio.sleep(0.3)
            samples = await exp.scrape()
            assert ("zaroz_traces_spans_waiting", frozenset()) in samples
            waiting.append(value(samples, "zaroz_traces_spans_waiting"))

        async def nothing_waits() -> bool:
            s = await exp.scrape()
            return (value(s, "zaroz_traces_spans_waiting") == 0
                    and value(s, "zaroz_traces_spans_exported_total") >= len(expected))

        await wait_for(nothing_waits, 60, f"spans still wait after the stream: {waiting[-5:]}")
    finally:
        await exp.kill()
        rx.stop()
        await route.stop()
    assert rx.count == len(expected)
    # What waits is what the tailer brought since the last checkpoint (it polls every ~2 s
    # here: ~6 steps of 40, ~15%; more on a loaded machine), never the history (an outbox that
    # kept every span it had released holds 87% of them by the last step).
    assert max(waiting) <= len(expected) / 2, waiting


# -- the one bound: --otlp-max-pending-spans ----------------------------------------------------


def test_spans_beyond_the_pending_bound_are_counted_and_logged_with_the_reason(
        tmp_path: Path, caplog: Any):
    sink = TraceSink(_Nothing(), TraceConfig(max_pending=10))  # type: ignore[arg-type]
    sink.checkpointed(tmp_path)
    assert sink.outbox is not None
    records = [SpanRecord("busy", 1, i + 1, 0, 0, 1, {}) for i in range(25)]
    with caplog.at_level("WARNING", logger="exporter.traces"):
        for r in records[:15]:
            sink.emit(r)
        assert (sink.stats.spans, sink.stats.dropped, sink.waiting()) == (15, 5, 10)
        sink.saved()  # a checkpoint covers the 10: released, accepted, gone from memory
        deadline = time.monotonic() + 10
        while sink.waiting() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sink.waiting() == 0 and not sink.outbox.released
        for r in records[15:]:
            sink.emit(r)
    assert (sink.stats.spans, sink.stats.dropped, sink.waiting()) == (25, 5, 10)
    warned = [r for r in caplog.records if "too many wait" in r.getMessage()]
    assert len(warned) == 1  # rate-limited
    assert warned[0].__dict__["reason"] == "waiting spans at --otlp-max-pending-spans"
    assert warned[0].__dict__["max_pending_spans"] == 10
    sink.shutdown(timeout=5)


def test_a_mark_that_cannot_be_written_keeps_the_batch_until_it_is(tmp_path: Path):
    from exporter.sinks.traces.outbox import Outbox
    from exporter.sinks.traces.sender import Sender

    box = Outbox(tmp_path)
    sent: list[int] = []
    write = box.mark.advance
    failures = [OSError(28, "No space left on device")] * 3

    def advance(serial: int) -> None:
        if failures:
            raise failures.pop()
        write(serial)

    box.mark.advance = advance  # type: ignore[method-assign]
    for i in range(5):
        box.hold(SpanRecord("busy", 1, i + 1, 0, 0, 1, {}))
    box.saved()
    sender = Sender(box, lambda rs: sent.extend(r.span_id for r in rs) or True, 5,
                    backoff_min=0.01, backoff_max=0.05)
    deadline = time.monotonic() + 10
    while box.released and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sender.drain(5)
    assert not failures and not box.released and box.mark.value == 5
    assert sent == [1, 2, 3, 4, 5]  # sent once: only the mark was tried again
    box.close()
