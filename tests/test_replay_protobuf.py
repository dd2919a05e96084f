"""`replay --format protobuf`: the simulator's ground truth in the protobuf exposition (classic
and native buckets), and a native-histogram Prometheus loading it by scraping the saved file."""

from __future__ import annotations

import http.server
import json
import math
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from exporter.cli import main
from exporter.sinks.metrics.native import NativeBuckets, NativeConfig
from exporter.sinks.metrics.protobuf import PROTOBUF_TYPE
from exporter.sinks.metrics.series import format_value
from tests import pbdecode
from tests.components import require, start_prometheus, stop_process
from tests.promapi import Prom, ok, wait
from tests.serving import free_port
from tests.simlogs import assert_matches_truth, finite_logs

LOGS, TRUTH = finite_logs(seed=5, workloads=2, seconds=300)


@pytest.fixture(scope="module")
def files() -> Iterator[list[str]]:
    with tempfile.TemporaryDirectory(prefix="zaroz-replay-pb-") as tmp:
        out = []
        for wl, evs in LOGS.items():
            p = Path(tmp) / f"{wl}.jsonl"
            p.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in evs))
            out.append(str(p))
        yield out


def _replay(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> bytes:
    assert main(["replay", *args]) == 0
    return capsysbinary.readouterr().out


def _as_text_samples(data: bytes) -> dict[tuple[str, frozenset], float]:
    """pbdecode's samples keyed like tests.simlogs.parse (le spelled as the text format does)."""
    out = {}
    for (name, labels), v in pbdecode.samples(data).items():
        fixed = {(k, ("+Inf" if math.isinf(float(x)) else format_value(float(x))) if k == "le"
                  else x) for k, x in labels}
        out[(name, frozenset(fixed))] = v
    return out


def test_protobuf_replay_matches_ground_truth_classic_and_native(files, capsysbinary):
    data = _replay(capsysbinary, "--format", "protobuf", "--native-histogram-schema", "5",
                   *files)
    assert assert_matches_truth(_as_text_samples(data), TRUTH, list(LOGS)) > 20
    fams = {mf.name: mf for mf in pbdecode.families(data)}
    ready = {dict((lp.name, lp.value) for lp in m.label)["workload"]: m.histogram
             for m in fams["zaroz_unit_ready_seconds"].metric}
    for wl, durations in TRUTH.ready.items():
        h = ready[wl]
        want = NativeBuckets(NativeConfig(5, 160))
        for d in durations:
            want.observe_ns(d)
        got = pbdecode.native_buckets(h)
        assert h.schema == want.schema
        assert sorted(got.values()) == sorted(want.buckets.values())
        assert h.zero_count + sum(got.values()) == len(durations) == h.sample_count


def test_format_flags(files, capsysbinary):
    om = _replay(capsysbinary, "--format", "openmetrics", *files)
    assert om == _replay(capsysbinary, "--openmetrics", *files)
    assert om.endswith(b"# EOF\n")
    capsysbinary.readouterr()
    assert main(["replay", "--openmetrics", "--format", "protobuf", *files]) == 2
    assert capsysbinary.readouterr().err == (b"zaroz-exporter replay: error: --openmetrics: "
                                             b"contradicts --format protobuf\n")
    # Classic only: no schema anywhere.
    data = _replay(capsysbinary, "--format", "protobuf", "--native-histogram-schema", "off",
                   *files)
    hists = [m.histogram for mf in pbdecode.families(data) if mf.type == 4 for m in mf.metric]
    assert hists and not any(h.HasField("schema") for h in hists)


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", PROTOBUF_TYPE)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_native_prometheus_loads_the_saved_protobuf(files, capsysbinary):
    """What works for the native form today: a Prometheus with native histograms scraping the
    saved file (the samples land at scrape time; promtool 2.42 backfills OpenMetrics with
    timestamps only, and has no native histogram input)."""
    prometheus = require("prometheus")
    _Handler.body = _replay(capsysbinary, "--format", "protobuf", *files)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="zaroz-replay-prom-") as tmp:
        cfg = Path(tmp) / "prometheus.yml"
        cfg.write_text(json.dumps({"global": {"scrape_interval": "1s"}, "scrape_configs": [
            {"job_name": "replay", "static_configs": [
                {"targets": [f"127.0.0.1:{httpd.server_address[1]}"]}]}]}))
        proc = start_prometheus(prometheus, cfg, f"{tmp}/data", port,
                                "--enable-feature=native-histograms")
        try:
            p = Prom(f"http://127.0.0.1:{port}")
            wait("prometheus ready", lambda: ok(f"{p.base}/-/ready"), 20)
            name = "zaroz_unit_ready_seconds"
            wait("the file scraped", lambda: p.result(f"histogram_count({name})"), 30)
            got = {r["metric"]["workload"]: float(r["value"][1])
                   for r in p.result(f"histogram_count({name})")}
            assert got == {wl: len(d) for wl, d in TRUTH.ready.items()}
            total = sum(sum(d) for d in TRUTH.ready.values()) / 1e9
            (s,) = p.result(f"histogram_sum(sum({name}))")
            assert float(s["value"][1]) == pytest.approx(total, rel=1e-9)
            # every other family too
            names = {r["metric"]["__name__"] for r in p.result(
                'count by (__name__) ({job="replay"})')}
            assert {"zaroz_events_total", "zaroz_unit_startups_total"} <= names
        finally:
            stop_process(proc)
            httpd.shutdown()
