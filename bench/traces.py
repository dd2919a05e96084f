"""Trace export throughput: spans per second end to end to a real OTLP/HTTP receiver, beside its
floors (building span records only; the SDK with an exporter that sends nothing).

Cases, on the same simulated logs applied through the Pipeline (model + metrics + traces):
- build: the model and the TraceBuilder, spans collected in a list (no export at all);
- sdk + no-op: the SDK pipeline (TracerProvider, BatchSpanProcessor) with a no-op exporter;
- encoded + no-op: records encoded into OTLP requests (wire.py, own batcher), not sent;
- otlp/http via SDK spans: the SDK pipeline to the receiver (the exporter before wire.py);
- otlp/http encoded, backpressure: replay's mode (nothing is dropped);
- otlp/http encoded, live queue: the live defaults (queue 65536): a burst, and what it dropped.
The receiver runs in its own process (`python -m tests.otlp_receiver`), so it does not share
this interpreter's GIL; its span count is read back to check that every span arrived.

Run: python -m bench.traces [--seconds S] [--rate R] [--repeat K]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from bench._common import ROOT, child_env, header, table
from exporter.sinks.traces.builder import SpanRecord
from exporter.sinks.traces.otlp import TraceConfig, TraceSink, otlp_exporter
from exporter.wiring.events import Pipeline
from zaroz_sim.scenario import SimConfig, Simulator

NS = 1_000_000_000


class NoopExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class NoopEncoded:
    """Takes encoded requests and sends nothing: the encoded pipeline's floor."""

    def export_encoded(self, body: bytes, count: int) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def logs(seconds: int, rate: float, seed: int = 1) -> dict[str, list[dict[str, Any]]]:
    cfg = SimConfig(seed=seed, workloads=3, arrival_rate=rate)
    sim = Simulator(cfg)
    out: dict[str, list[dict[str, Any]]] = {}
    for part in (sim.events_until(cfg.start_ns + seconds * NS), sim.finish(cfg.start_ns)):
        for wl, evs in part.items():
            out.setdefault(wl, []).extend(evs)
    return out


def apply(p: Pipeline, data: dict[str, list[dict[str, Any]]]) -> None:
    for wl, evs in data.items():
        log = p.workload(wl)
        for ev in evs:
            log.offer(ev)
        log.flush()


Result = tuple[int, float, int, float]  # spans, wall s, dropped, CPU s of this process


def run_build(data: dict[str, list[dict[str, Any]]]) -> Result:
    """The model with a TraceBuilder whose records go to a list: no SDK at all."""
    got: list[SpanRecord] = []

    class ListSink:  # the parts of TraceSink the pipeline uses
        idle_ns = 0

        def register(self, registry: object) -> None:
            pass

        def builder(self, wl: str) -> Any:
            from exporter.sinks.traces.builder import TraceBuilder

            return TraceBuilder(wl, got.append, idle_ns=self.idle_ns)

    p = Pipeline(traces=ListSink())  # type: ignore[arg-type]
    t, c = time.perf_counter(), time.process_time()
    apply(p, data)
    return len(got), time.perf_counter() - t, 0, time.process_time() - c


def run_sink(data: dict[str, list[dict[str, Any]]], exporter: Any,
             config: TraceConfig, sdk: bool = False) -> Result:
    sink = TraceSink(exporter, config, sdk=sdk)
    p = Pipeline(traces=sink)
    t, c = time.perf_counter(), time.process_time()
    apply(p, data)
    sink.shutdown()  # every span exported (or counted dropped) before the clock stops
    return (sink.stats.spans, time.perf_counter() - t, sink.stats.dropped,
            time.process_time() - c)


def run_models_only(data: dict[str, list[dict[str, Any]]]) -> tuple[float, float]:
    p = Pipeline()
    t, c = time.perf_counter(), time.process_time()
    apply(p, data)
    return time.perf_counter() - t, time.process_time() - c


def receiver() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.otlp_receiver"], cwd=ROOT, env=child_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def received(endpoint: str) -> int:
    with urllib.request.urlopen(endpoint + "/stats", timeout=10) as r:
        return int(json.load(r)["spans"])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.traces")
    ap.add_argument("--seconds", type=int, default=3600, help="simulated seconds of log")
    ap.add_argument("--rate", type=float, default=2.0, help="unit arrivals per second")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    header("traces: spans/s end to end vs floors")
    data = logs(args.seconds, args.rate)
    events = sum(len(v) for v in data.values())
    print(f"{events} events in {len(data)} workloads", flush=True)
    proc, endpoint = receiver()
    try:
        cases: dict[str, Callable[[], Result]] = {
            "build (no export)": lambda: run_build(data),
            "sdk + no-op exporter": lambda: run_sink(
                data, NoopExporter(), TraceConfig(backpressure=True)),
            "encoded + no-op exporter": lambda: run_sink(
                data, NoopEncoded(), TraceConfig(backpressure=True)),
            "otlp/http via SDK spans": lambda: run_sink(
                data, otlp_exporter(endpoint), TraceConfig(backpressure=True), sdk=True),
            "otlp/http, backpressure": lambda: run_sink(
                data, otlp_exporter(endpoint), TraceConfig(backpressure=True)),
            "otlp/http, live queue": lambda: run_sink(data, otlp_exporter(endpoint), TraceConfig()),
        }
        base, base_cpu = min(run_models_only(data) for _ in range(args.repeat))
        rows = [["case", "spans", "best s", "spans/s", "over model s", "cpu s", "spans/cpu-s",
                 "dropped", "received"]]
        for name, fn in cases.items():
            best: tuple[int, float, int, float, int] | None = None
            arrived_ok = True
            for _ in range(args.repeat):
                before = received(endpoint)
                n, s, dropped, cpu = fn()
                got = received(endpoint) - before
                if name.startswith("otlp") and got + dropped != n:
                    arrived_ok = False
                if best is None or s < best[1]:
                    best = (n, s, dropped, cpu, got)
            assert best is not None
            n, s, dropped, cpu, got = best
            rows.append([name, str(n), f"{s:.3f}", f"{n / s:,.0f}", f"{s - base:.3f}",
                         f"{cpu:.3f}", f"{n / cpu:,.0f}", str(dropped),
                         str(got) if name.startswith("otlp") else "-"])
            if not arrived_ok:
                print(f"!! {name}: received + dropped != spans in some round", flush=True)
        print(f"model + metrics alone (no traces): {base:.3f} s ({base_cpu:.3f} s CPU), "
              f"{events / base:,.0f} events/s")
        print(table(rows))
        print("spans/s counts the whole replay (model, metrics, spans, export) per span; "
              "'over model' is the time traces add; cpu s is this process's CPU time (all its "
              "threads; the receiver runs apart), which machine load disturbs less than wall "
              "time.")
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
