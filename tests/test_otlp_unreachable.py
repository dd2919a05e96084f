"""An unreachable OTLP collector: one rate-limited warning with the endpoint and the error, and
shutdown never delayed by more than 2 s (the SDK would otherwise retry for its export timeout)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path

import orjson

from exporter.sinks.traces.exportlog import ExportLog, short_error
from tests.serving import free_port
from tests.simlogs import finite_logs
from zaroz_sim.route import RouteServer
from zaroz_sim.scenario import SimConfig

ROOT = Path(__file__).resolve().parent.parent
LOGS, _ = finite_logs(seed=5, workloads=1, seconds=300)
# Not a speed figure: what the bound tells apart is the failure this guards against, a
# shutdown that waits out the SDK's export retries (backoff 1, 2, 4, 8... s, up to its 10 s
# export timeout) against one that gives up after TRACES_SHUTDOWN_S (1 s; ~1.5 s measured).
# Far from both on a loaded machine, unlike the 2 s it was.
SHUTDOWN_LIMIT_S = 6.0


def test_export_log_warns_once_per_interval(caplog):
    now = [0.0]
    el = ExportLog("http://c:4318/v1/traces", interval=60.0, clock=lambda: now[0])
    raw = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    el.install()
    try:
        with caplog.at_level(logging.INFO):
            for _ in range(5):
                raw.warning("Transient error %s encountered while exporting span batch, "
                            "retrying in 1.00s.", "HTTPConnectionPool(host='c', port=4318): Max "
                            "retries exceeded (Caused by NewConnectionError(': Failed to "
                            "establish a new connection: [Errno 111] Connection refused'))")
                now[0] += 10
            now[0] = 61
            raw.error("Failed to export span batch due to timeout, max retries or shutdown.")
            el.success()
    finally:
        el.remove()
    ours = [r for r in caplog.records if r.name == "exporter.traces"]
    assert [r.levelname for r in ours] == ["WARNING", "WARNING", "INFO"]
    assert ours[0].endpoint == "http://c:4318/v1/traces"
    assert ours[0].error == "[Errno 111] Connection refused"
    assert ours[1].held_back == 4
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]


def test_short_error_cuts_what_it_cannot_parse():
    assert short_error("x" * 500).endswith("…")
    assert len(short_error("x" * 500)) == 160
    assert short_error("grpc: StatusCode.UNAVAILABLE") == "grpc: StatusCode.UNAVAILABLE"


async def test_serve_with_unreachable_collector_warns_once_and_stops_fast():
    (wl, events), = LOGS.items()
    route = RouteServer(SimConfig(workloads=1).workload_list())
    route.append(wl, events)
    base = await route.start()
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZAROZ_", "OTEL_"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "exporter.cli", "serve", "--listen", "127.0.0.1:0",
        "--events-url", base, "--kube", "off", "--otlp-endpoint", endpoint,
        "--log-format", "json", cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    lines: list[dict] = []

    async def read() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            lines.append(orjson.loads(raw))

    reader = asyncio.create_task(read())
    try:
        deadline = time.monotonic() + 30
        while not any(d["msg"] == "OTLP trace export failing" for d in lines):
            assert time.monotonic() < deadline, lines
            await asyncio.sleep(0.1)
        await asyncio.sleep(6)  # the SDK retries at 1, 2, 4 s: each would have logged
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        await asyncio.wait_for(proc.wait(), 20)
        took = time.monotonic() - t0
        await reader
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await route.stop()
    warnings = [d for d in lines if d["level"] in ("warning", "error")]
    failing = [d for d in warnings if d["msg"] == "OTLP trace export failing"]
    assert len(failing) == 1, warnings
    assert failing[0]["endpoint"].startswith(endpoint)
    assert "Connection refused" in failing[0]["error"]
    assert all(len(d["msg"]) < 100 for d in warnings)
    assert not [d for d in lines if d["logger"].startswith("opentelemetry")]
    assert proc.returncode == 0
    assert took < SHUTDOWN_LIMIT_S, f"shutdown took {took:.2f} s"
