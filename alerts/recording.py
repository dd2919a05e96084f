"""Recording rules: the names dashboards and alerts share.

Names follow the kubernetes-mixin convention `level:metric:operations` (Prometheus "recording
rules" best practice): `level` is the aggregation labels joined by `_`, `metric` the catalog
metric (without `_total` once a rate is taken), `operations` what was applied, newest first.
Dashboards import the constants and functions below instead of spelling names, so a rename here
breaks their tests instead of silently emptying a panel.

The names never depend on configuration; only the SLO thresholds inside the SLO error-ratio
expressions do (see `alerts.config.SLO`), so a dashboard can always use the same name.

Every aggregation keeps the cluster label (kubernetes-mixin's `clusterLabel`, configurable,
`cluster` by default): Prometheus (external or target labels) or a global view (Thanos, Mimir)
adds it, and one rule file then serves many clusters without merging them. Where series carry
no such label, `by (cluster, ...)` is the same as without it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from alerts.template import Sym, call
from exporter import catalog

# Histograms with per-workload quantile records: the three headline measurements (event clock)
# and generation observe (cluster clock).
READY = "zaroz_unit_ready_seconds"
ALLOCATION_ACK = "zaroz_unit_allocation_ack_seconds"
DRAIN = "zaroz_unit_drain_seconds"
GENERATION_OBSERVE = "zaroz_unitsignal_generation_observe_seconds"
QUANTILE_HISTOGRAMS: tuple[str, ...] = (READY, ALLOCATION_ACK, DRAIN, GENERATION_OBSERVE)

# Quantiles recorded, keyed by the name fragment.
QUANTILES: dict[str, float] = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
# The rate window of quantile and ratio records: short enough for dashboards to follow an
# incident, long enough to hold a few observations at a 15-60 s scrape interval.
WINDOW = "5m"

CLUSTER_LABEL = "cluster"  # the default; alerts.config.Config.cluster_label overrides it

# SLO windows: the SRE workbook's multi-window multi-burn-rate pairs (long, short):
# page on (1h, 5m) and (6h, 30m), ticket on (1d, 2h) and (3d, 6h).
SLO_WINDOWS: tuple[str, ...] = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
# The shipped SLO thresholds in seconds (bucket bounds of their histograms); alerts.config's
# default SLOs use them, and `recording_rules()` without thresholds records them.
DEFAULT_SLO_THRESHOLDS: dict[str, float] = {"readiness": 60.0, "allocation_ack": 1.0}


@dataclass(frozen=True)
class RecordingRule:
    """One `record:` entry. `group` keeps rules of one evaluation cost together."""

    record: str
    expr: str
    group: str

    def as_dict(self) -> dict[str, str]:
        return {"record": self.record, "expr": self.expr}


def quantile_name(histogram: str, quantile: str, window: str = WINDOW) -> str:
    """`workload:<histogram>:p95_5m`, e.g. `workload:zaroz_unit_ready_seconds:p95_5m`."""
    if histogram not in QUANTILE_HISTOGRAMS:
        raise KeyError(f"no quantile records for {histogram}")
    if quantile not in QUANTILES:
        raise KeyError(f"no quantile {quantile}; have {sorted(QUANTILES)}")
    return f"workload:{histogram}:{quantile}_{window}"


def rate_name(histogram: str, window: str = WINDOW) -> str:
    """`workload:<histogram>_count:rate5m`: observations per second per workload."""
    return f"workload:{histogram}_count:rate{window}"


# Outcome ratios (per workload, per outcome, share of all outcomes over WINDOW).
ALLOCATIONS_RATE = "workload_outcome:zaroz_unit_allocations:rate5m"
ALLOCATIONS_RATIO = "workload_outcome:zaroz_unit_allocations:ratio_rate5m"
ALLOCATIONS_UNDELIVERED_RATIO = "workload:zaroz_unit_allocations_undelivered:ratio_rate5m"
ALLOCATIONS_ABANDONED_RATIO = "workload:zaroz_unit_allocations_abandoned:ratio_rate5m"
STARTUPS_RATE = "workload_outcome:zaroz_unit_startups:rate5m"
STARTUPS_RATIO = "workload_outcome:zaroz_unit_startups:ratio_rate5m"
STARTUPS_FAILED_RATIO = "workload:zaroz_unit_startups_failed:ratio_rate5m"
# Events lost (missing seqs) per second, per workload.
EVENTS_MISSING_RATE = "workload:zaroz_events_missing:rate5m"
# How far the applied seq trails the route's head, per workload.
EVENTS_BEHIND = "workload:zaroz_events_behind_head:seq"

# SLOs with multi-window burn-rate alerts: the SLO key and the histogram behind it.
SLO_HISTOGRAMS: dict[str, str] = {"readiness": READY, "allocation_ack": ALLOCATION_ACK}


def slo_error_ratio_name(slo: str, window: str) -> str:
    """`workload:zaroz_unit_ready_seconds:slo_error_ratio_rate1h`.

    The fraction of observations slower than the SLO threshold over `window`, per workload.
    """
    if slo not in SLO_HISTOGRAMS:
        raise KeyError(f"unknown SLO {slo}; have {sorted(SLO_HISTOGRAMS)}")
    if not isinstance(window, Sym) and window not in SLO_WINDOWS:
        raise KeyError(f"no SLO window {window}; have {SLO_WINDOWS}")
    return f"workload:{SLO_HISTOGRAMS[slo]}:slo_error_ratio_rate{window}"


def le_value(bound: float) -> str:
    """A bucket bound as the exporter writes it in `le` (Prometheus 2 compares strings).

    Mirrors `exporter.sinks.metrics.series.format_value`; a test keeps the two equal. (The
    mixin's `z.num` writes it in jsonnet.)
    """
    if isinstance(bound, Sym):
        return call("num", bound)
    if float(bound).is_integer():
        return str(int(bound))
    return repr(float(bound))


def om_float(bound: float) -> str:
    """A bucket bound as Prometheus 3 stores `le` (and `quantile`) whatever the exposition wrote,
    and Prometheus 2 from a protobuf scrape: Go's shortest `%g` with `.0` after an integer
    (`60` -> `60.0`, `1e6` -> `1e+06`). (The mixin's `z.omFloat` writes it in jsonnet.)"""
    f = float(bound)
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "0.0"
    d = Decimal(repr(f)).normalize()  # repr: the shortest digits that read back, as Go's
    _, digits, exp = d.as_tuple()
    assert isinstance(exp, int)
    point = len(digits) + exp - 1  # the exponent of the first digit
    if point < -4 or point >= 6:  # Go's %g picks %e at these for the shortest precision
        mant = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
        out = f"{mant}e{'-' if point < 0 else '+'}{abs(point):02d}"
    else:
        out = format(abs(d), "f")
    out = ("-" if f < 0 else "") + out
    return out if "." in out or "e" in out else out + ".0"


def le_regex(bound: float) -> str:
    """A regex for `le=~` matching `bound` however it is stored: as the exporter writes it
    (`60`; Prometheus 2 from the text formats) or normalised (`60.0`; Prometheus 3, and 2 from
    protobuf). `le="60"` finds nothing on Prometheus 3, `le="60.0"` nothing on 2 from text."""
    if isinstance(bound, Sym):
        return call("leRegex", bound)
    spellings = dict.fromkeys((le_value(bound), om_float(bound)))
    return "|".join(s.replace(".", "[.]").replace("+", "[+]") for s in spellings)


def check_bucket_boundary(histogram: str, threshold: float) -> str:
    """The `le` regex of `threshold` (`le_regex`), refusing one that is not a bucket bound of
    `histogram`.

    `rate(x_bucket{le="T"})` only exists for bounds; any other threshold would match no series
    and the SLO would silently read as 100% bad (or, worse, as no data).
    """
    metric = catalog.get(histogram)
    if metric.kind is not catalog.Kind.HISTOGRAM:
        raise ValueError(f"{histogram} is not a histogram")
    if isinstance(threshold, Sym):  # the mixin asserts the same, when jsonnet renders it
        return call("bucketBound", threshold, histogram, list(metric.buckets))
    if not any(abs(b - threshold) < 1e-12 for b in metric.buckets):
        raise ValueError(
            f"SLO threshold {threshold} s is not a bucket boundary of {histogram}; "
            f"choose one of {list(metric.buckets)}"
        )
    return le_regex(threshold)


def _quantile_rules(cl: str = CLUSTER_LABEL, native: bool = False) -> Iterable[RecordingRule]:
    """Native histograms: the same names, from the histogram series itself (no `_bucket`/`le`,
    no `_count`): `histogram_quantile` reads its exponential buckets."""
    for h in QUANTILE_HISTOGRAMS:
        yield RecordingRule(
            rate_name(h),
            f"histogram_count(sum by ({cl}, workload) (rate({h}[{WINDOW}])))" if native
            else f"sum by ({cl}, workload) (rate({h}_count[{WINDOW}]))",
            "zaroz-quantiles",
        )
        for key, q in QUANTILES.items():
            yield RecordingRule(
                quantile_name(h, key),
                f"histogram_quantile({q}, sum by ({cl}, workload) (rate({h}[{WINDOW}])))"
                if native else f"histogram_quantile({q}, sum by ({cl}, workload, le) "
                f"(rate({h}_bucket[{WINDOW}])))",
                "zaroz-quantiles",
            )


def _ratio_rules(cl: str = CLUSTER_LABEL) -> Iterable[RecordingRule]:
    g = "zaroz-ratios"
    for counter, rate, ratio in (
        ("zaroz_unit_allocations_total", ALLOCATIONS_RATE, ALLOCATIONS_RATIO),
        ("zaroz_unit_startups_total", STARTUPS_RATE, STARTUPS_RATIO),
    ):
        yield RecordingRule(
            rate, f"sum by ({cl}, workload, outcome) (rate({counter}[{WINDOW}]))", g)
        # A workload without outcomes in the window has no ratio (0/0 would be NaN).
        yield RecordingRule(
            ratio,
            f"{rate} / ignoring (outcome) group_left () "
            f"(sum by ({cl}, workload) ({rate}) > 0)",
            g,
        )
    for name, source, outcome in (
        (ALLOCATIONS_UNDELIVERED_RATIO, ALLOCATIONS_RATIO, "undelivered"),
        (ALLOCATIONS_ABANDONED_RATIO, ALLOCATIONS_RATIO, "abandoned"),
        (STARTUPS_FAILED_RATIO, STARTUPS_RATIO, "failed"),
    ):
        # `sum without` drops the outcome label; a workload that had outcomes but none of this
        # one reads 0 instead of being absent.
        yield RecordingRule(
            name,
            f'sum without (outcome) ({source}{{outcome="{outcome}"}}) '
            f"or (sum without (outcome) ({source}) * 0)",
            g,
        )
    yield RecordingRule(
        EVENTS_MISSING_RATE,
        f"sum by ({cl}, workload) (rate(zaroz_events_missing_total[{WINDOW}]))", g,
    )
    yield RecordingRule(
        EVENTS_BEHIND,
        f"max by ({cl}, workload) (zaroz_route_head_seq) - "
        f"max by ({cl}, workload) (zaroz_events_last_seq)",
        g,
    )


def slo_rules(slo: str, threshold: float, cl: str = CLUSTER_LABEL,
              native: bool = False) -> list[RecordingRule]:
    """Error ratios of one SLO over every SLO window (1 - share of observations <= threshold).

    Classic: the threshold must be a bucket bound; `clamp_min(..., 0)` guards against the bucket
    and count series being scraped a hair apart. Native: any threshold, through
    `histogram_fraction(0, threshold, ...)` (interpolated within the one native bucket holding
    the threshold), for workloads with observations in the window.
    """
    h = SLO_HISTOGRAMS[slo]
    if native:
        if not isinstance(threshold, Sym) and not threshold > 0:
            raise ValueError(f"SLO threshold must be > 0 s, got {threshold}")
        t = le_value(threshold)
    else:
        le = check_bucket_boundary(h, threshold)
    out = []
    for w in SLO_WINDOWS:
        if native:
            rate = f"sum by ({cl}, workload) (rate({h}[{w}]))"
            expr = (f"clamp_min(1 - histogram_fraction(0, {t}, {rate}), 0)\n"
                    f"and on ({cl}, workload) histogram_count({rate}) > 0")
        else:
            good = f'sum by ({cl}, workload) (rate({h}_bucket{{le=~"{le}"}}[{w}]))'
            total = f"sum by ({cl}, workload) (rate({h}_count[{w}]))"
            expr = f"clamp_min(1 - ({good} / ({total} > 0)), 0)"
        out.append(RecordingRule(slo_error_ratio_name(slo, w), expr,
                                 f"zaroz-slo-{slo.replace('_', '-')}"))
    return out


def recording_rules(slo_thresholds: dict[str, float] | None = None,
                    cluster_label: str = CLUSTER_LABEL,
                    native: bool = False) -> list[RecordingRule]:
    """Every recording rule, in file order. `slo_thresholds` maps SLO key to seconds; `native`:
    quantiles and SLO ratios from native histograms (same record names).

    Without thresholds: the shipped ones (`DEFAULT_SLO_THRESHOLDS`).
    """
    if slo_thresholds is None:
        slo_thresholds = DEFAULT_SLO_THRESHOLDS
    rules = [*_quantile_rules(cluster_label, native), *_ratio_rules(cluster_label)]
    for slo, threshold in slo_thresholds.items():
        rules.extend(slo_rules(slo, threshold, cluster_label, native))
    return rules


def recording_names() -> set[str]:
    """Every recorded name (independent of thresholds)."""
    names = {r.record for r in [*_quantile_rules(), *_ratio_rules()]}
    names.update(slo_error_ratio_name(s, w) for s in SLO_HISTOGRAMS for w in SLO_WINDOWS)
    return names
