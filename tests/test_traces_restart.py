"""A real `serve` killed with SIGKILL while units are between unit.created and unit.ready, then
restarted on the same --state-dir: the traces a real OTLP receiver gets equal an uninterrupted
run's (same ids, same spans, exact times), with no span twice."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from exporter.sinks.traces.otlp import TraceConfig, TraceSink, otlp_exporter
from exporter.sinks.traces.outbox import ACKED_FILE
from exporter.wiring.events import Pipeline
from exporter.wiring.state.store import read_state
from tests.otlp_receiver import OtlpReceiver, Span
from tests.serving import Feed
from tests.simlogs import finite_logs, parse, value
from tests.waiting import until
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer

LOGS, _ = finite_logs(seed=11, workloads=2, seconds=200, rate=0.8)
ROOT = Path(__file__).resolve().parent.parent


def key(s: Span) -> tuple[Any, ...]:
    """A span as a backend stores it, without the per-process resource."""
    return (s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns,
            tuple(sorted(s.attributes.items())), repr(s.events), s.status_code, s.status_message)


def uninterrupted() -> Counter:
    """What one exporter that never stopped sends: the same Pipeline and sink, all events."""
    with OtlpReceiver() as rx:
        sink = TraceSink(otlp_exporter(rx.endpoint), TraceConfig(backpressure=True))
        p = Pipeline(traces=sink)
        for wl, evs in LOGS.items():
            lg = p.workload(wl)
            for ev in evs:
                lg.offer(ev)
        sink.shutdown()
        assert sink.stats.dropped == 0 and sink.stats.export_failures == 0
    return Counter(key(s) for s in rx.spans)


async def spawn(route_url: str, state_dir: Path, otlp: str) -> tuple[Any, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OTEL_BSP_SCHEDULE_DELAY": "50"}
    args = ["serve", "--listen", "127.0.0.1:0", "--events-url", route_url, "--wait", "1",
            "--kube", "off", "--state-dir", str(state_dir), "--otlp-endpoint", otlp,
            "--checkpoint-interval", "0",  # checkpoints at scrapes only: the test says when
            "--log-format", "json", *(a for w in LOGS for a in ("--workload", w))]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; from exporter.cli import main; sys.exit(main())",
        *args, stderr=asyncio.subprocess.PIPE, cwd=ROOT, env=env)
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert line, "serve exited before serving"
        rec = orjson.loads(line) if line.startswith(b"{") else {}
        if rec.get("msg", rec.get("message")) == "serving metrics":
            asyncio.get_running_loop().create_task(_drain(proc.stderr))
            return proc, rec["url"].removesuffix("/metrics")
    raise AssertionError("serve did not say where it serves")


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def scrape(url: str) -> dict:
    """A scrape: it also saves the checkpoint, which releases the spans it covers."""
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        assert r.status == 200
        return parse(await r.text())


async def scrape_until(url: str, seqs: dict[str, int], timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        samples = await scrape(url)
        if all(value(samples, "zaroz_events_last_seq", workload=w) == n
               for w, n in seqs.items()):
            return samples
        assert time.monotonic() < deadline, "serve did not catch up in time"
        await asyncio.sleep(0.1)


async def test_sigkill_between_created_and_ready_loses_and_repeats_no_span(tmp_path: Path):
    expected = uninterrupted()
    assert sum(expected.values()) > 300
    route = RouteServer(SimConfig(workloads=2).workload_list())
    route_url = await route.start()
    n = {w: len(evs) for w, evs in LOGS.items()}
    stream = Feed(route, LOGS)
    feed, fed = stream.to, stream.fed

    procs = []
    with OtlpReceiver() as rx:
        try:
            feed(0.3)
            proc, url = await spawn(route_url, tmp_path, rx.endpoint)
            procs.append(proc)
            for f in (0.45, 0.6):
                await scrape_until(url, fed)
                feed(f)
            samples = await scrape_until(url, fed)  # saved through 0.6; its spans released
            released = value(samples, "zaroz_traces_spans_total")
            first = samples  # the counters a scraper saw last from the first process
            await until(lambda: len(rx.spans) >= released, 20.0, 0.05)  # ...and delivered
            feed(0.7)  # applied, never checkpointed: its spans must wait, then be rebuilt
            await asyncio.sleep(1.5)
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            before_kill = Counter(key(s) for s in rx.spans)

            stored = read_state(tmp_path)
            assert stored is not None
            saved = stored["traces"]
            starting = {(w, uid): u[9]["starting"] for w, b in saved["builders"].items()
                        for uid, u in b["units"].items() if "starting" in u[9]}
            assert starting, "no unit was between unit.created and unit.ready at the kill"
            acked = int((tmp_path / ACKED_FILE).read_text())
            # The checkpoint still lists spans delivered after it was saved: the ack mark is what
            # keeps them from being sent again.
            assert saved["outbox"]["spans"] and all(
                serial <= acked for serial, _ in saved["outbox"]["spans"])

            feed(1.0)
            proc, url = await spawn(route_url, tmp_path, rx.endpoint)
            procs.append(proc)
            resumed = await scrape(url)
            await scrape_until(url, n)
            await scrape(url)
            await until(lambda: len(rx.spans) >= sum(expected.values()), 20.0, 0.05)
            await asyncio.sleep(0.5)  # anything more (a duplicate) would arrive by now
            last = await scrape(url)
        finally:
            for p in procs:
                if p.returncode is None:
                    p.send_signal(signal.SIGKILL)
                    await p.wait()
            await route.stop()
        got = Counter(key(s) for s in rx.spans)
    assert max(got.values()) == 1, "a span was exported twice"
    assert got == expected
    # The spans open at the kill arrived whole: started before it, ended after it.
    ids = {f"{int(sid, 16):016x}" for sid, _, _ in starting.values()}
    after = [k for k in got if k[1] in ids]
    assert len(after) == len(ids) and not any(k[1] in ids for k in before_kill)
    assert all(k[3] == "starting" for k in after)
    # The span counters continue across the kill: no reset for any scraper.
    for name in ("zaroz_traces_spans_total", "zaroz_traces_spans_exported_total"):
        assert value(first, name) > 0
        assert value(first, name) <= value(resumed, name) <= value(last, name), name
