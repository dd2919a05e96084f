"""Metrics pushed over OTLP by the real `serve`, to a real OTLP/HTTP receiver: cumulative and
continuous across a SIGKILL and a restart on the same state dir (the same start times, no
value going down), native buckets as exponential histograms equal to the protobuf scrape's, and
a receiver away for a while then back missing no total."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from exporter import catalog
from exporter.sinks.metrics.otlp.names import otel_name
from tests import pbdecode
from tests.otlp_metrics_receiver import MetricsReceiver, Point
from tests.otlp_receiver import OtlpReceiver
from tests.serving import Feed, Serve, scrape
from tests.simlogs import finite_logs, value
from tests.waiting import until
from zaroz_sim.config import SimConfig
from zaroz_sim.route import RouteServer

# Families whose totals stand still once every event is applied (the rest count requests,
# saves and exports, which go on).
STILL = [m for m in catalog.METRICS if m.group in ("lifecycle", "events")]
COUNTERS = {otel_name(m.name, True)[0]: m.name for m in STILL if m.kind is catalog.Kind.COUNTER}
HISTOGRAMS = {otel_name(m.name, False)[0]: m.name for m in STILL
              if m.kind is catalog.Kind.HISTOGRAM}


def restarts(name: str) -> bool:
    """Families that really restart with the process, so with a new start time: its own
    checkpoint writes and the standard process_* and python_* ones."""
    return name.startswith("zaroz_checkpoint_saves") or not name.startswith("zaroz_")


def cumulative(rx: MetricsReceiver) -> dict[Any, list[Point]]:
    return {k: v for k, v in rx.series().items()
            if k[0] in ("sum", "histogram", "exponential_histogram")}


def resets(rx: MetricsReceiver) -> list[tuple[Any, float, float]]:
    """Cumulative points that went down, or whose start time changed, within a series."""
    out = []
    for k, pts in cumulative(rx).items():
        if restarts(k[1]):
            continue
        for a, b in itertools.pairwise(pts):
            if b.time_ns > a.time_ns and (b.value < a.value or b.start_ns != a.start_ns):
                out.append((k, a.value, b.value))
    return out


def received_totals(rx: MetricsReceiver) -> dict[tuple[str, frozenset], float]:
    """The latest value of every still counter, keyed as the text scrape keys it."""
    out = {}
    for (kind, name, attrs), p in rx.latest().items():
        if kind == "sum" and name in COUNTERS:
            out[(COUNTERS[name], attrs)] = p.value
    return out


async def _platform(seed: int) -> tuple[RouteServer, str, Feed, MetricsReceiver]:
    """Two workloads' simulated logs behind a route (fed on demand), and an OTLP receiver."""
    logs, _ = finite_logs(seed=seed, workloads=2, seconds=200, rate=0.8)
    route = RouteServer(SimConfig(workloads=2).workload_list())
    base = await route.start()
    return route, base, Feed(route, logs), MetricsReceiver().start()


async def _get(url: str, accept: str | None = None) -> bytes:
    headers = {"Accept": accept} if accept else {}
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics", headers=headers) as r:
        assert r.status == 200
        return await r.read()


async def test_serve_pushes_continuous_cumulative_metrics(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "1")  # an outage fails in 1 s
    route, base, feed, rx = await _platform(21)
    serve = Serve("--events-url", base, "--workload", "wl-1", "--workload", "wl-2",
                  "--wait", "1", "--backoff-max", "0.2", "--state-dir", str(tmp_path / "s"),
                  "--checkpoint-interval", "0.5", "--otlp-metrics-endpoint", rx.endpoint,
                  "--otlp-metrics-interval", "0.2", "--instance", "zaroz-0")
    try:
        feed.to(0.4)
        await serve.start()

        def fed_in(points: dict, fed: dict[str, int]) -> bool:
            return all(any(k[1] == "zaroz_events_last_seq" and dict(k[2]).get("workload") == w
                           and p.value == n for k, p in points.items()) for w, n in fed.items())

        await until(lambda: fed_in(rx.latest(), feed.fed), timeout=30)
        before = {k: v[-1].start_ns for k, v in cumulative(rx).items()}
        assert any(k[1] == "zaroz_events" for k in before)
        res = next(iter(rx.points)).resource
        assert res["service.instance.id"] == "zaroz-0" and res["service.name"] == "zaroz-exporter"

        await serve.kill()  # SIGKILL, then a restart on the same state dir
        feed.to(0.7)
        await serve.start()
        await until(lambda: fed_in(rx.latest(), feed.fed), timeout=30)
        after = {k: v[-1].start_ns for k, v in cumulative(rx).items()}
        moved = {k[1] for k, ns in before.items() if k in after and after[k] != ns
                 and not restarts(k[1])}
        assert {k[1] for k, ns in before.items() if k in after and after[k] != ns} == {
            k[1] for k in before if k in after and restarts(k[1])}, "a restart must show"
        assert not moved, f"start times changed across the restart: {sorted(moved)}"

        # Faults: 503 with Retry-After, then down altogether, while events go on; and from then
        # on a receiver that takes small requests only (413: split).
        rx.fail_status, rx.retry_after = 503, "0"
        feed.to(0.85)
        await until(lambda: rx.refused >= 2, timeout=30)
        rx.stop()
        rx.fail_status, rx.max_body = None, 30_000
        feed.to(1.0)
        async with aiohttp.ClientSession() as s:
            async def failing() -> bool:
                got = await scrape(serve.url, s)
                return bool(got) and value(got, "zaroz_exporter_otlp_metrics_exports_total",
                                           result="failure") >= 2
            for _ in range(300):
                if await failing():
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("no failed export counted while the receiver was away")
        rx.start()
        await until(lambda: fed_in(rx.latest(), feed.fed), timeout=30)
        assert rx.too_large  # those requests split, and their halves accepted

        # Every still counter of the final scrape, with its value, as one series each.
        text = await _get(serve.url)
        from tests.simlogs import parse

        final = {k: v for k, v in parse(text.decode()).items() if k[0] in COUNTERS.values()}
        assert final
        got = received_totals(rx)
        missing = {k: v for k, v in final.items() if got.get(k) != v}
        assert not missing, f"totals not received as scraped: {list(missing.items())[:5]}"
        assert not resets(rx), resets(rx)[:5]

        # Native buckets: the exponential histograms are the protobuf scrape's.
        pb = await _get(serve.url, "application/vnd.google.protobuf; "
                        "proto=io.prometheus.client.MetricFamily; encoding=delimited")
        latest = rx.latest()
        compared = 0
        for mf in pbdecode.families(pb):
            if mf.name not in HISTOGRAMS.values() or mf.type != pbdecode.TYPES["HISTOGRAM"]:
                continue
            oname = otel_name(mf.name, False)[0]
            for m in mf.metric:
                attrs = frozenset((lp.name, lp.value) for lp in m.label)
                p = latest[("exponential_histogram", oname, attrs)]
                h = m.histogram
                assert (p.value, p.detail["scale"], p.detail["zero_count"]) == (
                    h.sample_count, h.schema, h.zero_count)
                base = 2.0 ** (2.0 ** -p.detail["scale"])
                buckets = {base ** (p.detail["offset"] + i + 1): c
                           for i, c in enumerate(p.detail["buckets"]) if c}
                expected = pbdecode.native_buckets(h)
                assert set(buckets) == set(expected) or all(
                    abs(a - b) < 1e-9 * a for a, b in zip(sorted(buckets), sorted(expected),
                                                           strict=True)), mf.name
                assert sorted(buckets.values()) == sorted(expected.values()), mf.name
                compared += 1
        assert compared
    finally:
        await serve.kill()
        rx.close()
        await route.stop()


SPAN_OF = {"zaroz_unit_ready_seconds": "starting",
           "zaroz_unit_allocation_ack_seconds": "allocation",
           "zaroz_unit_drain_seconds": "draining"}


async def test_exemplars_carry_the_trace_and_span_ids_of_the_exported_spans():
    """Through the real `serve`, traces and metrics both over OTLP: every exemplar's trace_id
    and span_id (8 bytes) are those of a span the trace receiver got, of the kind the
    histogram measures."""
    route, base, feed, rx = await _platform(9)
    traces = OtlpReceiver().start()
    serve = Serve("--events-url", base, "--workload", "wl-1", "--workload", "wl-2",
                  "--wait", "1", "--backoff-max", "0.2", "--kube", "off",
                  "--otlp-endpoint", traces.endpoint, "--otlp-metrics-endpoint", rx.endpoint,
                  "--otlp-metrics-interval", "0.2")
    try:
        feed.to(1.0)
        await serve.start()

        def exemplars() -> dict[tuple[str, str], str]:
            out = {}
            for (kind, name, _), p in rx.latest().items():
                if kind == "histogram" and HISTOGRAMS.get(name) in SPAN_OF:
                    for trace, span, _ in p.detail["exemplars"]:
                        out[(trace, span)] = SPAN_OF[HISTOGRAMS[name]]
            return out

        def named() -> bool:
            got = exemplars()
            spans = {(s.trace_id, s.span_id): s.name for s in traces.spans}
            return set(got.values()) == set(SPAN_OF.values()) and all(
                spans.get(k) == kind for k, kind in got.items())

        await until(named, timeout=30)
        assert all(len(bytes.fromhex(span)) == 8 for _, span in exemplars())
    finally:
        await serve.kill()
        rx.close()
        traces.stop()
        await route.stop()


async def test_a_sigterm_before_the_next_interval_sends_the_final_totals(tmp_path: Path):
    """An interval of an hour: nothing is sent until the SIGTERM, whose final export (after
    the last save) carries every still counter as the last scrape served it."""
    route, base, feed, rx = await _platform(13)
    serve = Serve("--events-url", base, "--workload", "wl-1", "--workload", "wl-2",
                  "--wait", "1", "--backoff-max", "0.2", "--state-dir", str(tmp_path / "s"),
                  "--otlp-metrics-endpoint", rx.endpoint, "--otlp-metrics-interval", "3600")
    try:
        feed.to(1.0)
        await serve.start()
        from tests.simlogs import parse

        async with aiohttp.ClientSession() as s:
            async def applied() -> bool:
                got = await scrape(serve.url, s)
                return bool(got) and all(
                    value(got, "zaroz_events_last_seq", workload=w) == n
                    for w, n in feed.fed.items())
            for _ in range(300):
                if await applied():
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("the events were not applied")
        final = {k: v for k, v in parse((await _get(serve.url)).decode()).items()
                 if k[0] in COUNTERS.values()}
        assert final and rx.requests == 0
        await serve.terminate()
        assert serve.proc is not None and serve.proc.returncode == 0
        got = received_totals(rx)
        missing = {k: v for k, v in final.items() if got.get(k) != v}
        assert not missing, f"final totals not received: {list(missing.items())[:5]}"
    finally:
        await serve.kill()
        rx.close()
        await route.stop()
