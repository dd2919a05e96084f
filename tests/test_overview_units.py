"""The overview's arithmetic: bucket quantiles as Prometheus computes them, and windows from the
histogram ring."""

from __future__ import annotations

import math

from exporter.overview.collect import overview
from exporter.overview.history import History
from exporter.overview.quantiles import bucket_quantile, nearest_rank
from exporter.wiring.events import Pipeline


def test_bucket_quantile_interpolates_like_histogram_quantile() -> None:
    bounds = (1.0, 2.0, 4.0)
    # 10 in (0,1], 10 in (1,2], 0 in (2,4], 0 above
    assert bucket_quantile(0.5, bounds, [10, 10, 0, 0]) == 1.0
    assert bucket_quantile(0.75, bounds, [10, 10, 0, 0]) == 1.5
    assert bucket_quantile(0.25, bounds, [10, 10, 0, 0]) == 0.5
    assert bucket_quantile(0.99, bounds, [0, 0, 0, 5]) == 4.0  # +Inf: the highest bound
    assert math.isnan(bucket_quantile(0.5, bounds, [0, 0, 0, 0]))


def test_nearest_rank() -> None:
    assert nearest_rank([1, 2, 3, 4], 0.5) == 2
    assert nearest_rank([1, 2, 3, 4], 0.99) == 4
    assert math.isnan(nearest_rank([], 0.5))


def _ready(pipeline: Pipeline, wl: str, seconds: float) -> None:
    pipeline.workload(wl).obs.ready("u", int(seconds * 1e9))  # type: ignore[attr-defined]


def test_window_covers_only_recent_observations() -> None:
    p = Pipeline()
    h = History(p.registry, step=10.0, keep=600.0)
    h.tick(0.0)
    for _ in range(100):
        _ready(p, "wl-1", 100.0)  # old and slow
    h.tick(10.0)
    for t in range(20, 400, 10):
        h.tick(float(t))
    for _ in range(10):
        _ready(p, "wl-1", 0.2)  # recent and fast
    d = overview(p.registry, h, lambda: (True, "ok"), 400.0, window=300.0)
    ready = d["workloads"][0]["measurements"]["ready"]
    assert ready["count"] == 10
    assert ready["p99"] is not None and ready["p99"] <= 0.25
    # A window longer than what is held covers everything since the first snapshot.
    d = overview(p.registry, h, lambda: (True, "ok"), 400.0, window=10_000.0)
    assert d["workloads"][0]["measurements"]["ready"]["count"] == 110


def test_drain_sums_reasons_and_trend_has_points() -> None:
    p = Pipeline()
    h = History(p.registry, step=10.0)
    h.tick(0.0)
    obs = p.workload("wl-1").obs
    for t in range(10, 110, 10):
        obs.drain("u", "scale_down", 2_000_000_000)  # type: ignore[attr-defined]
        obs.drain("u", "other", 3_000_000_000)  # type: ignore[attr-defined]
        h.tick(float(t))
    d = overview(p.registry, h, lambda: (True, "ok"), 105.0)
    drain = d["workloads"][0]["measurements"]["drain"]
    assert drain["count"] == 20
    assert sum(1 for v in drain["trend_p95"] if v is not None) >= 5
    assert d["workloads"][0]["measurements"]["ack"]["p50"] is None  # no data is null, not 0
